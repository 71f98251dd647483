"""Rate limits per client, per user, per listener and connects per address
on the real host server (docs/limits.md "Rate
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

from common.broker.ratelimit import SLICE
from tests.host.broker_proc import BrokerProcess, Paho, RawClient, publish_packet, wait_until

RATE = 100
FAST = 1000  # a host's rate_messages: the release step is SLICE x 1000 / FAST ms


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


def passwd_file(path: Path, *users: str) -> None:
    """A password file with each user's password its name reversed (siskin passwd)."""
    from tests.host.test_server_security import siskin_passwd

    for i, user in enumerate(users):
        siskin_passwd(path, user, user[::-1], *(("-c",) if i == 0 else ()))


def test_the_connections_of_one_user_share_its_bucket(tmp_path: Path) -> None:
    # Two raw 3.1.1 connections of alice send 300 PUBLISHes each at once;
    # no per-client rate is set, but together they are read at alice's
    # user_rate_messages (100/s, a bucket of 100): all 600 arrive, none
    # lost, and not before 4 s (the limit makes it slow, whatever the load;
    # without it they arrive in well under a second). Bob on the same
    # listener keeps his round trips meanwhile.
    passwd_file(tmp_path / "passwd", "alice", "bob", "watch")
    limits = {"user_rate_messages": RATE, "rate_grace": 0, "sys_interval": 1}
    security = {"password_file": "passwd", "allow_anonymous": False}
    with BrokerProcess(tmp_path, limits=limits, security=security) as b:
        counter = Paho(b.port, "counter", username="watch", password="hctaw", protocol=5).connect()
        counter.subscribe("flood/#", 0)
        bob = Paho(b.port, "bob", username="bob", password="bob", protocol=5).connect()
        bob.subscribe("calm/echo", 1)
        floods = []
        for i in range(2):
            raw = RawClient(b.port)
            assert raw.connect(f"alice{i}", username="alice", password=b"ecila") == b"\x00\x00"
            floods.append(raw)
        packet = publish_packet("flood/x", b"f" * 20, 0) * 50
        started = time.monotonic()
        for raw in floods:
            threading.Thread(target=lambda r=raw: [r.send(packet) for _ in range(6)], daemon=True).start()
        b.wait_log(r"alice\d: over user_rate_messages 100 \(PUBLISHes/s, its user's\): not read until it is back under")
        for i in range(5):
            bob.publish("calm/echo", b"%d" % i, 1)
            assert bob.get(timeout=10).payload == b"%d" % i
        for _ in range(600):
            counter.get(timeout=10)
        took = time.monotonic() - started
        assert took >= 4.0, took  # 600 at 100/s with a bucket of 100: 5 s, less a refill's edge
        assert "over rate_messages" not in b.log_text()  # (no per-client rate: the user's bucket held them)
        values: dict[str, str] = {}
        watcher = Paho(b.port, "watcher", username="watch", password="hctaw", protocol=5).connect()
        watcher.client.on_message = lambda c, u, m: values.__setitem__(m.topic, m.payload.decode())
        watcher.subscribe("$SYS/broker/clients/rate_held/#", 0)
        wait_until(
            lambda: int(values.get("$SYS/broker/clients/rate_held/user_messages", "0")) >= 1,
            15,
            lambda: f"rate_held/user_messages: {values}",
        )
        for p in (counter, bob, watcher):
            p.close()
        assert "Traceback" not in b.log_text()


def test_the_clients_of_one_listener_share_its_bucket(tmp_path: Path) -> None:
    # A flooder on the second listener is held to that listener's rate; a
    # client of the first listener is not held, and its round trips go on.
    limits = {"listener_rate_messages": RATE, "rate_grace": 0}
    with BrokerProcess(tmp_path, limits=limits, listeners=[{"port": 0}, {"port": 0}]) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        first, second = b.ports()
        calm = Paho(first, "calm", protocol=5).connect()
        calm.subscribe("calm/echo", 1)
        raw = RawClient(second)
        assert raw.connect("loud") == b"\x00\x00"
        stop = threading.Event()
        threading.Thread(target=flood, args=(raw, stop), daemon=True).start()
        b.wait_log(r"loud: over listener_rate_messages 100 \(PUBLISHes/s, its listener's\)")
        for i in range(5):
            calm.publish("calm/echo", b"%d" % i, 1)
            assert calm.get(timeout=10).payload == b"%d" % i
        stop.set()
        assert "calm: over" not in b.log_text()
        calm.close()


def test_connects_per_source_address(tmp_path: Path) -> None:
    # rate_connects 2: a reconnect loop from 127.0.0.1 is refused beyond two
    # CONNECTs a second: 3.1.1 CONNACK 0x03 then close [MQTT-3.2.2-5], v5 (paho) 0x9F.
    with BrokerProcess(tmp_path, limits={"rate_connects": 2}) as b:
        answers = []
        started = time.monotonic()
        for i in range(30):
            raw = RawClient(b.port)
            answers.append(raw.connect(f"loop{i}"))
            if answers[-1] != b"\x00\x00":
                assert raw.closed_within(5)
            raw.close()
        elapsed = time.monotonic() - started
        accepted = answers.count(b"\x00\x00")
        assert set(answers) <= {b"\x00\x00", b"\x00\x03"}, answers
        # At most the bucket (2) and 2 a second more over the loop's seconds.
        assert accepted <= 2 * (elapsed + 2), (accepted, elapsed)
        assert accepted >= 2
        # Until the bucket refills, a v5 client gets 0x9F (Connection rate exceeded).
        for _ in range(50):
            p = Paho(b.port, "v5", protocol=5)
            p.client.connect(p.host, p.port)
            p.client.loop_start()
            assert p.connected.wait(5)
            p.client.loop_stop()
            if p.connack_rc.value == 0x9F:
                break
            assert p.connack_rc.value == 0, p.connack_rc  # (a token was there: spend it and try again)
            p.client.disconnect()
        assert p.connack_rc.value == 0x9F
        b.wait_log(r"refused CONNECT on #\d+: over rate_connects 2 CONNECTs/s from 127\.0\.0\.1")
        assert "Traceback" not in b.log_text()


def test_a_held_back_flooder_is_read_at_its_rate_by_the_timer_alone(tmp_path: Path) -> None:
    # 2.5 s worth of PUBLISHes at once, rate_messages 1000 (a host's rate:
    # the release step is 2 ms, common/broker/ratelimit.py): the bucket's
    # 1000 (and one into debt) pass, then the flooder is held back and read
    # again by the broker's timer alone (nobody else sends: Driver.wake)
    # until all have passed, and at no moment has more arrived than the
    # bucket and what the rate earned since the flood was sent: never a
    # second's worth ahead of its rate (nor the rest of the flood at once).
    # How much one release passes (2 PUBLISHes a step) depends on the
    # timer keeping time (a late one releases what was earned meanwhile):
    # tests/core/test_rate_refill.py proves it on a hand-turned clock.
    total = FAST * 5 // 2
    with BrokerProcess(tmp_path, limits={"rate_messages": FAST, "rate_grace": 0}) as b:
        counter = RawClient(b.port)
        assert counter.connect("counter") == b"\x00\x00"
        assert counter.subscribe("flood/#", 0) == 0
        raw = RawClient(b.port)
        assert raw.connect("flooder") == b"\x00\x00"
        sent = time.monotonic()  # (the broker's ms ticks read the same clock)
        sender = threading.Thread(target=raw.send, args=(publish_packet("flood/x", b"f" * 20, 0) * total,))
        sender.start()
        for n in range(1, total + 1):
            pkt = counter.read_packet(timeout=10)
            assert pkt is not None and pkt[0] == 0x30, pkt
            # The bucket, one into debt, what the rate earned since `sent`
            # (+ 1 for the rounding of the broker's ms ticks) and what a
            # step before it may have been credited (the bucket is refilled
            # at most once a step: SLICE at the fastest rate).
            allowed = FAST + 1 + int(FAST * (time.monotonic() - sent)) + 1 + SLICE
            assert n <= allowed, (n, allowed)
        sender.join()
        b.wait_log(r"flooder: over rate_messages 1000 \(PUBLISHes/s\): not read until it is back under")
        counter.close()
        raw.close()
        assert "Traceback" not in b.log_text()


def paho_flood(p: Paho, stop: threading.Event) -> None:
    """QoS 0 PUBLISHes as fast as paho sends them, until `stop` or the broker closes it."""
    while not stop.is_set() and not p.disconnected.is_set():
        p.client.publish("flood/p", b"x" * 20, 0)
        time.sleep(0.0005)


def test_each_listener_has_its_own_client_rate(tmp_path: Path) -> None:
    # [limits] rate_messages 100; the first listener (the public one) sets
    # 20, the second (internal) 0: off there. The same v5 flooder on each:
    # held back then DISCONNECT 0x96 on the first, untouched on the second
    # though it floods [limits]' rate as long.
    from tests.host.test_web import scrape

    limits = {"rate_messages": RATE, "rate_grace": 2}
    listeners = [{"port": 0, "rate_messages": 20}, {"port": 0, "rate_messages": 0}]
    with BrokerProcess(tmp_path, limits=limits, listeners=listeners, http={"port": 0}) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        b.wait_log(r"127\.0\.0\.1:\d+: rate limits of its own: rate_messages 20; the rest as \[limits\]")
        b.wait_log(r"127\.0\.0\.1:\d+: rate limits of its own: rate_messages off; the rest as \[limits\]")
        reasons: dict[str, list[Any]] = {"public": [], "internal": []}
        flooders = {}
        for name, port in zip(reasons, b.ports(), strict=True):
            p = Paho(port, name, protocol=5)
            p.client.on_disconnect = lambda c, u, f, rc, props, name=name: reasons[name].append(rc)
            flooders[name] = p.connect()
        stop = threading.Event()
        for p in flooders.values():
            threading.Thread(target=paho_flood, args=(p, stop), daemon=True).start()
        b.wait_log(r"public: over rate_messages 20 \(PUBLISHes/s\): not read until it is back under")
        wait_until(lambda: reasons["public"], 30, "public disconnected")
        assert reasons["public"][0].value == 0x96  # Message rate too high
        b.wait_log(r"closing public: over its rate limits for rate_grace 2 s; sent DISCONNECT reason 0x96")
        # The internal flooder sent all along: never held, never closed.
        stop.set()
        assert not reasons["internal"]
        assert "internal: over" not in b.log_text()
        flooders["internal"].publish("calm/after", b"still here", 1)  # (its PUBACK: served)
        # /metrics counts the holds per listener too (numbered as in the config).
        samples = scrape(b.http_url())
        assert samples[("siskin_listener_rate_held_total", (("cause", "messages"), ("listener", "1")))] >= 1
        assert not [k for k in samples if k[0] == "siskin_listener_rate_held_total" and ("listener", "2") in k[1]]
        flooders["internal"].close()
        flooders["public"].client.loop_stop()
        assert "Traceback" not in b.log_text()


def test_each_listener_has_its_own_connect_rate(tmp_path: Path) -> None:
    # [limits] rate_connects 2; the second listener sets 0 (off there): a
    # reconnect loop from 127.0.0.1 is refused on the first (3.1.1 CONNACK
    # 0x03 [MQTT-3.2.2-5]) and never on the second.
    listeners = [{"port": 0}, {"port": 0, "rate_connects": 0}]
    from tests.host.test_web import scrape

    with BrokerProcess(tmp_path, limits={"rate_connects": 2}, listeners=listeners, http={"port": 0}) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        first, second = b.ports()
        for i in range(30):
            raw = RawClient(second)
            assert raw.connect(f"internal{i}") == b"\x00\x00", i
            raw.close()
        answers = []
        for i in range(50):
            raw = RawClient(first)
            answers.append(raw.connect(f"public{i}"))
            raw.close()
            if answers[-1] != b"\x00\x00":
                break
        assert answers[-1] == b"\x00\x03", answers
        b.wait_log(r"refused CONNECT on #\d+: over rate_connects 2 CONNECTs/s from 127\.0\.0\.1")
        samples = scrape(b.http_url())
        assert samples[("siskin_listener_connect_rate_refused_total", (("listener", "1"),))] == 1
        assert ("siskin_listener_connect_rate_refused_total", (("listener", "2"),)) not in samples
        assert "Traceback" not in b.log_text()


def test_listener_rate_config_errors_are_refused_at_start(tmp_path: Path) -> None:
    from tests.host.broker_proc import run_cli, write_config

    cases = [
        ({"rate_messages": -1}, "[[listener]] #1: rate_messages = -1: wants an integer >= 0; fix the value."),
        ({"rate_mesages": 20}, "[[listener]] #1: unknown key 'rate_mesages'; did you mean 'rate_messages'?"),
        ({"rate_grace": 3}, "[[listener]] #1: rate_grace is not a per-listener setting; set it in [limits]"),
        ({"user_rate_messages": 3}, "user_rate_messages is not a per-listener setting; set it in [limits]"),
    ]
    for extra, message in cases:
        cfg = write_config(tmp_path / "bad.toml", listeners=[{"port": 0, **extra}])
        proc = run_cli("--config", str(cfg))
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert message in proc.stderr, (extra, proc.stderr)
