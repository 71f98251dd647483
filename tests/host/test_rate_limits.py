"""Rate limits per client on the real host server (docs/limits.md "Rate
limits"): a client flooding QoS 0 at many times its rate_messages over a raw
socket (3.1.1) and with paho 5.0 is held back (read at its rate), then, after
rate_grace, disconnected (v5 DISCONNECT 0x96, 3.1.1 close), counted in $SYS
and logged with its client id, while a bystander's round trips go on. The
core's side: tests/core/test_ratelimit.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.host.broker_proc import BrokerProcess, Paho, RawClient, publish_packet, wait_until

RATE = 100


def flood(sock: RawClient, stop: threading.Event) -> None:
    packet = publish_packet("flood/x", b"f" * 20, 0) * 50
    try:
        while not stop.is_set():
            sock.send(packet)
    except OSError:
        pass  # closed by the broker


def test_flooders_are_held_back_then_closed(tmp_path: Path) -> None:
    limits = {"rate_messages": RATE, "rate_grace": 3, "sys_interval": 1}
    with BrokerProcess(tmp_path, limits=limits) as b:
        counter = Paho(b.port, "counter", protocol=5).connect()
        assert [r.value for r in counter.subscribe("flood/#", 0)] == [0]
        bystander = Paho(b.port, "bystander", protocol=5).connect()
        bystander.subscribe("calm/echo", 1)
        # A 3.1.1 flooder on a raw socket: the kernel buffers fill and it blocks.
        raw = RawClient(b.port)
        assert raw.connect("flood311") == b"\x00\x00"
        stop = threading.Event()
        threading.Thread(target=flood, args=(raw, stop), daemon=True).start()
        # A v5 flooder with paho: told 0x96.
        p5 = Paho(b.port, "flood5", protocol=5)
        reasons: list[Any] = []
        p5.client.on_disconnect = lambda c, u, f, rc, props: reasons.append(rc)
        p5.connect()
        started = time.monotonic()

        def flood5() -> None:
            while not reasons and not stop.is_set():
                p5.client.publish("flood/5", b"x" * 20, 0)
                time.sleep(0.0005)

        threading.Thread(target=flood5, daemon=True).start()
        # The bystander's round trips go on while both are held back.
        for i in range(5):
            bystander.publish("calm/echo", b"%d" % i, 1)
            assert bystander.get(timeout=10).payload == b"%d" % i
        b.wait_log(r"flood311: over rate_messages 100 \(PUBLISHes/s\): not read until it is back under")
        wait_until(lambda: reasons, 30, "flood5 disconnected")
        assert reasons[0].value == 0x96  # Message rate too high
        assert raw.closed_within(30)  # 3.1.1: closed
        stop.set()
        elapsed = time.monotonic() - started
        b.wait_log(r"closing flood5: over its rate limits for rate_grace 3 s; sent DISCONNECT reason 0x96")
        b.wait_log(r"closing flood311: over its rate limits for rate_grace 3 s; sent no code")
        # What was read of them: at most their rate over the time they were
        # connected, plus a second's bucket each.
        got = 0
        import queue

        while True:
            try:
                counter.messages.get(timeout=1)
            except queue.Empty:
                break
            got += 1
        assert got <= 2 * RATE * (elapsed + 2), (got, elapsed)
        assert got >= RATE, got  # (they did send: read at their rate)
        values: dict[str, str] = {}
        watcher = Paho(b.port, "watch", protocol=5).connect()
        watcher.client.on_message = lambda c, u, m: values.__setitem__(m.topic, m.payload.decode())
        watcher.subscribe("$SYS/broker/clients/#", 0)
        # (The retained $SYS topics arrive one by one: wait for both.)
        wait_until(
            lambda: values.get("$SYS/broker/clients/closed/rate_limited") == "2"
            and "$SYS/broker/clients/rate_held/messages" in values,
            15,
            lambda: f"closed_rate_limited 2 and rate_held/messages: {values}",
        )
        assert int(values["$SYS/broker/clients/rate_held/messages"]) >= 2
        for p in (counter, bystander, watcher):
            p.close()
        p5.client.loop_stop()
        assert "Traceback" not in b.log_text()
