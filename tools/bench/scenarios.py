"""The load scenarios: each runs worker processes against one broker port and
returns one dict of results (printed as one JSON line).

Workers are separate processes (multiprocessing, fork) with blocking raw
sockets and pre-encoded packets; each reports its own CPU time
(time.process_time) and wall time, so `gen_cpu` in the results shows whether
the generator, rather than the broker, was saturated (1.0 = one full core).
`broker_cpu` is the broker process's CPU over the same interval, read from
/proc/<pid>/stat by the caller when it knows the pid.

Flow control, so a fast generator measures the broker and not its buffers:
- QoS 0 publishers send a batch followed by PINGREQ and keep at most two
  batches unanswered (PINGRESP comes after the broker processed the batch);
- QoS 1 publishers keep two batches of PUBLISH unacknowledged;
- QoS 2 publishers send batch k with the PUBRELs of batch k-1 and wait for
  all its PUBRECs (and the previous PUBCOMPs) before the next.
Publishers run for `duration` seconds; subscribers then wait until they have
everything that was sent, or until nothing arrives for `idle` seconds.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import selectors
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from . import mqtt

CTX = mp.get_context("fork")
RECV = 1 << 18
# (port, client id, topic filter, QoS) -> a connected, subscribed socket
Opener = Callable[[int, str, str, int], socket.socket]


def _cpu_wall() -> tuple[float, float]:
    return time.process_time(), time.monotonic()


def _usage(cpu0: float, wall0: float) -> dict[str, float]:
    cpu, wall = _cpu_wall()
    w = max(wall - wall0, 1e-9)
    return {"cpu_s": round(cpu - cpu0, 3), "wall_s": round(w, 3), "cpu": round((cpu - cpu0) / w, 3)}


def broker_cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process (and its reaped children), in seconds."""
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def vmrss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    s = sorted(samples)

    def pick(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 1)

    return {"p50": pick(0.50), "p90": pick(0.90), "p99": pick(0.99)}


# ------------------------------------------------------------------ workers


def _run_worker(target: Callable[..., dict[str, Any]], q: Any, *args: Any) -> None:
    try:
        res = target(*args)
    except Exception as e:  # reported, so the driver never hangs on a dead worker
        res = {"error": f"{type(e).__name__}: {e}"}
    q.put(res)


class Workers:
    """Start worker processes that each put one dict on a shared queue."""

    def __init__(self) -> None:
        self.q: Any = CTX.Queue()
        self.procs: list[Any] = []

    def start(self, target: Callable[..., dict[str, Any]], *args: Any) -> None:
        p = CTX.Process(target=_run_worker, args=(target, self.q, *args), daemon=True)
        p.start()
        self.procs.append(p)

    def results(
        self, n: int, timeout: float, on_result: Callable[[dict[str, Any]], None] | None = None
    ) -> list[dict[str, Any]]:
        """`n` results in arrival order; `on_result` sees each as it comes."""
        out = []
        deadline = time.monotonic() + timeout
        for _ in range(n):
            left = deadline - time.monotonic()
            try:
                res = self.q.get(timeout=max(left, 0.1))
            except Exception:
                res = {"error": "worker timed out"}
            out.append(res)
            if on_result is not None:
                on_result(res)
        return out

    def close(self) -> None:
        for p in self.procs:
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join(2)


def _check(results: list[dict[str, Any]]) -> None:
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError("worker failed: " + "; ".join(errors))


def _wait_all(events: list[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for e in events:
        if not e.wait(max(deadline - time.monotonic(), 0.01)):
            raise RuntimeError("a worker did not get ready in time (broker refused or too slow)")


def publisher(
    port: int,
    client_id: str,
    topic: str,
    qos: int,
    batch: int,
    duration: float,
    ready: Any,
    go: Any,
    stamp: bool = False,
    max_messages: int = 0,
) -> dict[str, Any]:
    """Publish 64 B messages in flow-controlled batches for `duration` s."""
    sock = mqtt.open_client(port, client_id)
    sock.settimeout(30)
    window = 1 if qos == 2 else 2
    # Pre-encoded blobs: two slots of packet ids (1..B, B+1..2B) alternate.
    blobs = [bytearray(mqtt.publish_batch(topic, qos, 1 + s * batch, batch)) for s in range(2)]
    rels = [mqtt.ack_batch(mqtt.PUBREL, 1 + s * batch, batch) for s in range(2)]
    per_msg = len(mqtt.publish(topic, mqtt.payload(), qos, 1))
    stamp_at = per_msg - mqtt.PAYLOAD_SIZE  # payload offset of the batch's first message
    if qos == 0:
        blobs = [b + mqtt.PINGREQ for b in blobs]
    ready.set()
    go.wait()
    cpu0, wall0 = _cpu_wall()
    end = wall0 + duration
    cum: list[int] = []  # bytes of answers expected after each blob
    expected = 0
    received = 0
    sent = 0
    k = 0
    buf = bytearray(RECV)
    while True:
        if k >= window:
            need = cum[k - window]
            while received < need:
                n = sock.recv_into(buf)
                if not n:
                    raise ConnectionError("broker closed the publisher")
                received += n
        if time.monotonic() >= end or (max_messages and sent >= max_messages):
            break
        slot = k & 1
        blob = blobs[slot]
        if stamp:
            blob[stamp_at : stamp_at + 8] = mqtt.stamp_now()
        if qos == 2:
            if k:
                sock.sendall(blob + rels[slot ^ 1])
                expected += 8 * batch
            else:
                sock.sendall(blob)
                expected += 4 * batch
        else:
            sock.sendall(blob)
            expected += 2 if qos == 0 else 4 * batch
        cum.append(expected)
        sent += batch
        k += 1
    if qos == 2 and k:
        sock.sendall(rels[(k - 1) & 1])
        expected += 4 * batch
    while received < expected:
        n = sock.recv_into(buf)
        if not n:
            raise ConnectionError("broker closed the publisher")
        received += n
    t_end = time.monotonic()
    res = {"sent": sent, "t_start": wall0, "t_end": t_end, **_usage(cpu0, wall0)}
    sock.sendall(mqtt.DISCONNECT)
    sock.close()
    return res


def subscriber(
    port: int,
    client_id: str,
    topic_filter: str,
    qos: int,
    ready: Any,
    total: Any,
    idle: float,
    limit: float,
    opener: Opener | None = None,
) -> dict[str, Any]:
    """One subscriber that acknowledges as it goes; counts PUBLISHes.

    Stops when `total.value` (set once every publisher is done) messages
    arrived, after `idle` s of silence once the total is known, or at `limit` s.
    `opener`: connects and subscribes another way (a persistent session).
    """
    if opener is None:
        sock = mqtt.open_client(port, client_id)
        mqtt.do_subscribe(sock, topic_filter, qos)
    else:
        sock = opener(port, client_id, topic_filter, qos)
    sock.settimeout(0.1)
    # Fan-in topics all have one length (bench/in/NNN), so QoS 0 deliveries do too.
    fixed_len = 0 if qos else len(mqtt.publish(topic_filter.replace("+", "000"), mqtt.payload(), 0))
    got_bytes = 0
    ready.set()
    cpu0, wall0 = _cpu_wall()
    count = 0
    dups = 0
    t_first = 0.0
    t_last = 0.0
    last_data = wall0
    buf = bytearray()
    packets: list[tuple[int, int, int]] = []
    while True:
        want = total.value
        now = time.monotonic()
        if want >= 0 and (count >= want or now - last_data > idle):
            break
        if now - wall0 > limit:
            break
        try:
            chunk = sock.recv(RECV)
        except TimeoutError:
            continue
        if not chunk:
            raise ConnectionError("broker closed the subscriber")
        last_data = t_last = time.monotonic()
        if not t_first:
            t_first = t_last
        if fixed_len:
            # QoS 0: every delivery has the same length; count bytes, parse nothing.
            got_bytes += len(chunk)
            count = got_bytes // fixed_len
            if len(chunk) < 8192:
                # A broker that writes each message on its own (Mosquitto)
                # would cost a recv() per message: let a few accumulate.
                time.sleep(0.0002)
            continue
        buf += chunk
        used = mqtt.parse(buf, 0, packets)
        acks = []
        for first, start, _end in packets:
            ptype = first & 0xF0
            if ptype == 0x30:
                count += 1
                if first & 0x08:
                    dups += 1
                if qos:
                    n = (buf[start] << 8) | buf[start + 1]
                    pid = buf[start + 2 + n : start + 4 + n]
                    acks.append((b"\x40\x02" if qos == 1 else b"\x50\x02") + pid)
            elif ptype == 0x60:  # PUBREL -> PUBCOMP
                acks.append(b"\x70\x02" + buf[start : start + 2])
        packets.clear()
        del buf[:used]
        if acks:
            sock.sendall(b"".join(acks))
    if fixed_len and got_bytes % fixed_len:
        raise RuntimeError(f"QoS 0 deliveries of unexpected length ({got_bytes} bytes, {fixed_len} each)")
    res = {"received": count, "dups": dups, "t_first": t_first, "t_last": t_last, **_usage(cpu0, wall0)}
    sock.close()
    return res


def fan_subscribers(
    port: int,
    prefix: str,
    n: int,
    topic: str,
    ready: Any,
    total: Any,
    idle: float,
    limit: float,
    packet_len: int,
) -> dict[str, Any]:
    """`n` QoS 0 subscribers on one selector; the first one also samples latency.

    QoS 0 deliveries of one topic all have the same length, so the others
    only count bytes.
    """
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(n):
        s = mqtt.open_client(port, f"{prefix}-{i}")
        mqtt.do_subscribe(s, topic, 0)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
    got = [0] * n
    ready.set()
    cpu0, wall0 = _cpu_wall()
    probe = bytearray()
    latencies: list[float] = []
    stamp_at = packet_len - mqtt.PAYLOAD_SIZE
    t_first = 0.0
    t_last = 0.0
    last_data = wall0
    done = 0
    known = False
    while True:
        want = total.value
        now = time.monotonic()
        if want >= 0 and not known:
            known = True
            done = sum(1 for g in got if g // packet_len >= want)
        if known and (done >= n or now - last_data > idle):
            break
        if now - wall0 > limit:
            break
        events = sel.select(0.1)
        if not events:
            continue
        now = time.monotonic()
        now_ns = time.monotonic_ns()
        for key, _mask in events:
            i = key.data
            try:
                data = key.fileobj.recv(RECV)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            if not data:
                raise ConnectionError("broker closed a fan-out subscriber")
            before = got[i] // packet_len
            got[i] += len(data)
            if known and before < want <= got[i] // packet_len:
                done += 1
            if i == 0:
                probe += data
                whole = len(probe) - len(probe) % packet_len
                for off in range(stamp_at, whole, packet_len):
                    sent_ns = mqtt.read_stamp(probe, off)
                    if sent_ns:
                        latencies.append((now_ns - sent_ns) / 1000.0)
                del probe[:whole]
        last_data = t_last = now
        if not t_first:
            t_first = now
    messages = sum(g // packet_len for g in got)
    ragged = sum(1 for g in got if g % packet_len)
    res = {
        "received": messages,
        "ragged": ragged,
        "t_first": t_first,
        "t_last": t_last,
        "latency_us": latencies,
        **_usage(cpu0, wall0),
    }
    for s in socks:
        s.close()
    return res


# ---------------------------------------------------------------- scenarios


def fan_in(
    port: int,
    qos: int = 0,
    publishers: int = 4,
    duration: float = 3.0,
    batch: int = 0,
    idle: float = 2.0,
    pid: int | None = None,
    tag: str = "",
    opener: Opener | None = None,
) -> dict[str, Any]:
    """N publishers -> 1 subscriber (bench/in/NNN -> bench/in/+) at one QoS.

    `opener(port, client_id, filter, qos)`: the subscriber's connect and subscribe
    (tools/bench/scenarios_durable.py: a persistent session)."""
    # QoS 2: batch k goes out with the PUBRELs of batch k-1, so 2 x 8 ids are
    # open at once: within Mosquitto's 16 (max_inflight_messages also caps
    # unreleased incoming QoS 2; beyond it Mosquitto loses messages).
    batch = batch or {0: 100, 1: 32, 2: 8}[qos]
    tag = tag or f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    w = Workers()
    total = CTX.Value("q", -1)
    go = CTX.Event()
    sub_ready = CTX.Event()
    try:
        w.start(subscriber, port, f"fi-sub-{tag}", "bench/in/+", qos, sub_ready, total, idle, duration + 120, opener)
        _wait_all([sub_ready], 20)
        readies = []
        for i in range(publishers):
            r = CTX.Event()
            readies.append(r)
            w.start(publisher, port, f"fi-pub-{tag}-{i}", f"bench/in/{i:03d}", qos, batch, duration, r, go)
        _wait_all(readies, 30)
        cpu_b0 = broker_cpu_seconds(pid)
        t_go = time.monotonic()
        go.set()
        pubs: list[dict[str, Any]] = []

        def seen(res: dict[str, Any]) -> None:
            if "sent" in res:
                pubs.append(res)
                if len(pubs) == publishers:
                    total.value = sum(p["sent"] for p in pubs)
            elif "error" in res:
                total.value = 0  # let the others stop

        results = w.results(publishers + 1, duration + 240 + idle, seen)
        _check(results)
        sent = sum(p["sent"] for p in pubs)
        sub = next(r for r in results if "received" in r)
        t_end = sub["t_last"] or time.monotonic()
        cpu_b = broker_cpu_seconds(pid) - cpu_b0
    finally:
        w.close()
    got = sub["received"]
    span = max(t_end - t_go, 1e-9)
    return {
        "scenario": f"fanin_qos{qos}",
        "publishers": publishers,
        "qos": qos,
        "payload": mqtt.PAYLOAD_SIZE,
        "duration_s": duration,
        "sent": sent,
        "delivered": got,
        "loss": round(max(sent - got, 0) / sent, 5) if sent else 0.0,
        "dups": sub["dups"],
        "msg_per_s": round(got / span),
        "span_s": round(span, 3),
        "broker_cpu": round(cpu_b / span, 3) if pid else None,
        "broker_us_per_msg": round(cpu_b * 1e6 / got, 2) if pid and got else None,
        "gen_cpu": {"subscriber": sub["cpu"], "publishers": [p["cpu"] for p in pubs]},
    }


def fan_out(
    port: int,
    subscribers: int = 100,
    duration: float = 3.0,
    batch: int = 0,
    procs: int = 2,
    idle: float = 2.0,
    pid: int | None = None,
    tag: str = "",
) -> dict[str, Any]:
    """1 publisher -> N QoS 0 subscribers of one topic; deliveries/s and latency."""
    batch = batch or max(1, 1000 // subscribers)
    tag = tag or f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    topic = "bench/out"
    packet_len = len(mqtt.publish(topic, mqtt.payload(), 0))
    procs = max(1, min(procs, subscribers))
    w = Workers()
    total = CTX.Value("q", -1)
    go = CTX.Event()
    try:
        readies = []
        share = [subscribers // procs + (1 if i < subscribers % procs else 0) for i in range(procs)]
        for i, n in enumerate(share):
            r = CTX.Event()
            readies.append(r)
            w.start(fan_subscribers, port, f"fo-{tag}-{i}", n, topic, r, total, idle, duration + 120, packet_len)
        _wait_all(readies, 60)
        pub_ready = CTX.Event()
        w.start(publisher, port, f"fo-pub-{tag}", topic, 0, batch, duration, pub_ready, go, True)
        _wait_all([pub_ready], 20)
        cpu_b0 = broker_cpu_seconds(pid)
        t_go = time.monotonic()
        go.set()

        def seen(res: dict[str, Any]) -> None:
            if "sent" in res:
                total.value = res["sent"]
            elif "error" in res:
                total.value = 0

        results = w.results(procs + 1, duration + 240 + idle, seen)
        _check(results)
        pub = next(r for r in results if "sent" in r)
        subs_res = [r for r in results if "received" in r]
        cpu_b = broker_cpu_seconds(pid) - cpu_b0
    finally:
        w.close()
    return _fan_out_result(subscribers, batch, duration, pub, subs_res, t_go, cpu_b, pid)


def _fan_out_result(
    subscribers: int,
    batch: int,
    duration: float,
    pub: dict[str, Any],
    subs_res: list[dict[str, Any]],
    t_go: float,
    cpu_b: float,
    pid: int | None,
) -> dict[str, Any]:
    sent = pub["sent"]
    got = sum(r["received"] for r in subs_res)
    t_end = max((r["t_last"] for r in subs_res), default=0.0) or time.monotonic()
    span = max(t_end - t_go, 1e-9)
    lat: list[float] = []
    for r in subs_res:
        lat.extend(r["latency_us"])
    expected = sent * subscribers
    return {
        "scenario": f"fanout_{subscribers}",
        "subscribers": subscribers,
        "qos": 0,
        "payload": mqtt.PAYLOAD_SIZE,
        "duration_s": duration,
        "sent": sent,
        "delivered": got,
        "loss": round(max(expected - got, 0) / expected, 5) if expected else 0.0,
        "ragged": sum(r["ragged"] for r in subs_res),
        "deliveries_per_s": round(got / span),
        "span_s": round(span, 3),
        "latency_us": percentiles(lat),
        "latency_samples": len(lat),
        "broker_cpu": round(cpu_b / span, 3) if pid else None,
        "broker_us_per_delivery": round(cpu_b * 1e6 / got, 2) if pid and got else None,
        "gen_cpu": {"publisher": pub["cpu"], "subscribers": [r["cpu"] for r in subs_res]},
    }


def latency_worker(port: int, count: int, tag: str) -> dict[str, Any]:
    cpu0, wall0 = _cpu_wall()
    topic = f"bench/lat/{tag}"
    sock = mqtt.open_client(port, f"lat-{tag}")
    sock.settimeout(10)
    buf = bytearray(RECV)
    body = mqtt.payload()
    # PUBLISH QoS 1 -> PUBACK (4 bytes), packet ids cycling 1..1000.
    pubs = [mqtt.publish(topic, body, 1, i) for i in range(1, 1001)]
    for i in range(min(count // 10, 200)):  # warm-up
        sock.sendall(pubs[i % 1000])
        mqtt.recv_exact(sock, 4)
    puback: list[float] = []
    for i in range(count):
        t0 = time.perf_counter_ns()
        sock.sendall(pubs[i % 1000])
        got = 0
        while got < 4:
            n = sock.recv_into(buf, 4 - got)
            if not n:
                raise ConnectionError("broker closed the latency client")
            got += n
        puback.append((time.perf_counter_ns() - t0) / 1000.0)
    # publish -> own subscription (QoS 0 both ways): the same bytes come back.
    mqtt.do_subscribe(sock, topic, 0, 7)
    pkt = mqtt.publish(topic, body, 0)
    size = len(pkt)
    for _ in range(min(count // 10, 200)):
        sock.sendall(pkt)
        mqtt.recv_exact(sock, size)
    roundtrip: list[float] = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        sock.sendall(pkt)
        got = 0
        while got < size:
            n = sock.recv_into(buf, size - got)
            if not n:
                raise ConnectionError("broker closed the latency client")
            got += n
        roundtrip.append((time.perf_counter_ns() - t0) / 1000.0)
    sock.sendall(mqtt.DISCONNECT)
    sock.close()
    return {"puback": puback, "roundtrip": roundtrip, **_usage(cpu0, wall0)}


def latency(port: int, count: int = 2000, pid: int | None = None, tag: str = "") -> dict[str, Any]:
    """Sequential PUBLISH QoS 1 -> PUBACK and publish -> own-subscription delivery."""
    tag = tag or f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    w = Workers()
    try:
        cpu_b0 = broker_cpu_seconds(pid)
        t0 = time.monotonic()
        w.start(latency_worker, port, count, tag)
        res = w.results(1, 300)[0]
        _check([res])
        span = time.monotonic() - t0
        cpu_b = broker_cpu_seconds(pid) - cpu_b0
    finally:
        w.close()
    return {
        "scenario": "latency",
        "count": count,
        "payload": mqtt.PAYLOAD_SIZE,
        "puback_us": percentiles(res["puback"]),
        "roundtrip_us": percentiles(res["roundtrip"]),
        "broker_cpu": round(cpu_b / span, 3) if pid else None,
        "broker_us_per_msg": round(cpu_b * 1e6 / (2 * (count + min(count // 10, 200))), 2) if pid else None,
        "gen_cpu": {"client": res["cpu"]},
    }


def idle_worker(
    port: int, prefix: str, n: int, group: int, ready: Any, release: Any, topic: str | None = None
) -> dict[str, Any]:
    """Open `n` connections, `group` at a time (connect all, CONNECT all, read CONNACKs);
    with `topic`, then SUBSCRIBE each (QoS 1) to `topic/<its number>` and read the SUBACKs."""
    cpu0, wall0 = _cpu_wall()
    socks: list[socket.socket] = []
    for g in range(0, n, group):
        batch = []
        for i in range(g, min(n, g + group)):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(mqtt.connect(f"{prefix}-{i}"))
            batch.append(s)
        for s in batch:
            connack = mqtt.recv_exact(s, 4)
            if connack[0] != 0x20 or connack[3] != 0:
                raise RuntimeError(f"CONNACK refused: {connack.hex()}")
        if topic is not None:
            for i, s in enumerate(batch, g):
                s.sendall(mqtt.subscribe(1, f"{topic}/{i}", 1))
            for s in batch:
                suback = mqtt.recv_exact(s, 5)
                if suback[0] != 0x90 or suback[4] >= 0x80:
                    raise RuntimeError(f"SUBACK refused: {suback.hex()}")
        socks.extend(batch)
    t_done = time.monotonic()
    res = {"opened": len(socks), "t_start": wall0, "t_done": t_done, **_usage(cpu0, wall0)}
    ready.set()
    release.wait(120)
    for s in socks:
        try:
            s.sendall(mqtt.DISCONNECT)
        except OSError:
            pass
        s.close()
    return res


def hold_clients(
    port: int,
    clients: int,
    procs: int,
    group: int,
    prefix: str,
    pid: int | None = None,
    topic: str | None = None,
    held: Callable[[], Any] | None = None,
) -> tuple[list[dict[str, Any]], float, float, Any]:
    """`clients` connections from `procs` idle_worker processes, all open (and
    subscribed, with `topic`) at once, then closed. Returns the workers'
    results, the broker's CPU seconds until all were ready, the span from the
    first connect to the last answer (s), and what held() returned, called
    while they were all open."""
    procs = max(1, min(procs, clients))
    cpu_b0 = broker_cpu_seconds(pid)
    w = Workers()
    release = CTX.Event()
    try:
        readies = []
        share = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
        for i, n in enumerate(share):
            r = CTX.Event()
            readies.append(r)
            w.start(idle_worker, port, f"{prefix}-{i}", n, group, r, release, None if topic is None else f"{topic}-{i}")
        _wait_all(readies, 120)
        cpu_b = broker_cpu_seconds(pid) - cpu_b0
        extra = held() if held is not None else None
        release.set()
        res = w.results(procs, 60)
        _check(res)
    finally:
        release.set()
        w.close()
    span = max(r["t_done"] for r in res) - min(r["t_start"] for r in res)
    return res, cpu_b, span, extra


def idle(
    port: int,
    clients: int = 1000,
    procs: int = 4,
    group: int = 20,
    settle: float = 1.0,
    pid: int | None = None,
    tag: str = "",
) -> dict[str, Any]:
    """`clients` idle connections: connect rate, and broker RSS per connection."""
    tag = tag or f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    rss0 = vmrss_bytes(pid) if pid else 0

    def rss_settled() -> int:
        time.sleep(settle)
        return vmrss_bytes(pid) if pid else 0

    res, cpu_b, span, rss1 = hold_clients(port, clients, procs, group, f"idle-{tag}", pid, held=rss_settled)
    opened = sum(r["opened"] for r in res)
    return {
        "scenario": "idle",
        "clients": opened,
        "connect_per_s": round(opened / max(span, 1e-9)),
        "rss_before": rss0,
        "rss_after": rss1,
        "rss_per_conn": round((rss1 - rss0) / opened) if pid and opened else None,
        "broker_cpu": round(cpu_b / max(span, 1e-9), 3) if pid else None,
        "broker_us_per_connect": round(cpu_b * 1e6 / opened, 1) if pid and opened else None,
        "gen_cpu": {"clients": [r["cpu"] for r in res]},
    }


def retained_worker(port: int, topics: int, batch: int, tag: str, limit: float) -> dict[str, Any]:
    cpu0, wall0 = _cpu_wall()
    body = mqtt.payload()
    prefix = f"bench/ret{tag}"
    pub = mqtt.open_client(port, f"ret-pub-{tag}")
    pub.settimeout(limit)
    t0 = time.monotonic()
    outstanding = 0
    for g in range(0, topics, batch):
        blob = b"".join(mqtt.publish(f"{prefix}/{i:05d}", body, 0, 0, True) for i in range(g, min(topics, g + batch)))
        pub.sendall(blob + mqtt.PINGREQ)
        outstanding += 1
        if outstanding == 2:
            mqtt.recv_exact(pub, 2)
            outstanding -= 1
    while outstanding:
        mqtt.recv_exact(pub, 2)
        outstanding -= 1
    t_stored = time.monotonic() - t0
    sub = mqtt.open_client(port, f"ret-sub-{tag}")
    sub.settimeout(60)
    packets: list[tuple[int, int, int]] = []
    buf = bytearray()
    count = 0
    t_first = None
    t1 = time.monotonic()
    sub.sendall(mqtt.subscribe(1, "#", 0))
    sub.settimeout(limit)
    while count < topics:
        try:
            chunk = sub.recv(RECV)
        except TimeoutError:
            break  # a broker that stalls: report what arrived
        if not chunk:
            raise ConnectionError("broker closed the # subscriber")
        buf += chunk
        used = mqtt.parse(buf, 0, packets)
        for first, _s, _e in packets:
            if first & 0xF0 == 0x30 and first & 1:
                count += 1
        if count and t_first is None:
            t_first = time.monotonic() - t1
        packets.clear()
        del buf[:used]
    t_replay = time.monotonic() - t1 if count >= topics else None
    for s in (pub, sub):
        s.close()
    return {"received": count, "store_s": t_stored, "replay_s": t_replay, "first_s": t_first, **_usage(cpu0, wall0)}


def retained(
    port: int, topics: int = 10000, batch: int = 500, pid: int | None = None, tag: str = "", limit: float = 20.0
) -> dict[str, Any]:
    """`topics` retained messages, then the time until a `#` subscriber has them all.

    A subscriber that sees nothing for `limit` s gives up: replay_s is then
    null and `received` says how many arrived.
    """
    tag = tag or f"{time.monotonic_ns() % 10**9}"
    w = Workers()
    try:
        w.start(retained_worker, port, topics, batch, tag, limit)
        res = w.results(1, 300)[0]
        _check([res])
    finally:
        w.close()
    return {
        "scenario": "retained",
        "topics": topics,
        "payload": mqtt.PAYLOAD_SIZE,
        "received": res["received"],
        "store_s": round(res["store_s"], 4),
        "replay_s": None if res["replay_s"] is None else round(res["replay_s"], 4),
        "first_s": None if res["first_s"] is None else round(res["first_s"], 4),
        "gen_cpu": {"client": res["cpu"]},
    }


def retained_publish_worker(port: int, count: int, window: int, tag: str) -> dict[str, Any]:
    cpu0, wall0 = _cpu_wall()
    body = mqtt.payload()
    prefix = f"bench/retpub{tag}"
    pub = mqtt.open_client(port, f"retpub-{tag}")
    pub.settimeout(30)
    buf = bytearray()
    packets: list[tuple[int, int, int]] = []
    sent = acked = 0
    t0 = time.monotonic()
    while acked < count:
        if sent < count and sent - acked < window:
            n = min(window - (sent - acked), count - sent)
            pub.sendall(b"".join(mqtt.publish(f"{prefix}/{i}", body, 1, i % 65535 + 1, True) for i in range(sent, sent + n)))
            sent += n
        chunk = pub.recv(RECV)
        if not chunk:
            raise ConnectionError("broker closed the retained publisher")
        buf += chunk
        used = mqtt.parse(buf, 0, packets)
        acked += sum(1 for first, _s, _e in packets if first == mqtt.PUBACK)
        packets.clear()
        del buf[:used]
    span = time.monotonic() - t0
    # Cleared again (QoS 0, empty retained), so that later rounds' replays do not carry them.
    for g in range(0, count, 500):
        pub.sendall(b"".join(mqtt.publish(f"{prefix}/{i}", b"", 0, 0, True) for i in range(g, min(count, g + 500))))
    pub.sendall(mqtt.PINGREQ)
    mqtt.recv_exact(pub, 2)
    pub.close()
    return {"span_s": span, **_usage(cpu0, wall0)}


def retained_publish(
    port: int, count: int = 10000, window: int = 64, pid: int | None = None, tag: str = ""
) -> dict[str, Any]:
    """`count` retained QoS 1 messages to as many topics, `window` in flight: the rate.
    (With a store each is durable before its PUBACK: scenarios_durable.retained_publish counts the fsyncs.)"""
    tag = tag or f"{time.monotonic_ns() % 10**9}"
    w = Workers()
    cpu_b0 = broker_cpu_seconds(pid)
    try:
        w.start(retained_publish_worker, port, count, window, tag)
        res = w.results(1, 300)[0]
        _check([res])
    finally:
        w.close()
    span = res["span_s"]
    return {
        "scenario": "retained_pub",
        "count": count,
        "window": window,
        "msg_per_s": round(count / span) if span else None,
        "broker_cpu": round((broker_cpu_seconds(pid) - cpu_b0) / span, 3) if pid and span else None,
        "gen_cpu": {"client": res["cpu"]},
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
