"""PyPy: the JIT compiles the connection paths before the first client comes.

PyPy interprets a function until it has run about 1,600 times, and its
interpreter is slower than CPython's: a fresh PyPy broker's first 1,000
connects cost it 240 µs of CPU each, a warm one's 50-80 (docs/benchmarks.md,
"The connect path"). The moment a broker meets the most connects at once
is just after it starts: every client of a restarted broker reconnects. So
before the listeners open, `warm_up` runs the core through those paths in
memory: clients of both protocol levels, in batches, that connect,
subscribe, publish at each QoS and acknowledge, take each other's sessions
over, disconnect or drop, through the same Turns and Driver the shell
feeds (common/turns.py, common/driver.py), on a broker of its own with the
same settings, no log and no $SYS; with a store of its own in a scratch
directory when the real broker has one (half its clients' sessions then
persistent), removed after. Its driver is made as the real
one is (its clock, its logger, its security): compiled code checks which
function a call reaches, and a stand-in's would leave the first real
clients to compile the rest (docs/benchmarks.md, "A fresh PyPy broker's
first connects"). Nothing of it is kept: its broker is dropped and
collected, only the compiled code stays (the real broker's objects have
the same classes, so the same code serves them).

When the config sets rate limits, `_flood` then runs clients over them
through the hold and the release (common/broker/ratelimit.py, rate_hold.py,
the driver's _follow): a fresh PyPy broker compiled those while its first
flood was on, and a bystander's PUBLISH that came behind a trace waited
for it (docs/benchmarks.md, "the flooded tail is the JIT's first meeting
with the flood").

What it cannot reach in memory is the shell's socket code (epoll_hub.py:
accepting, reading, writing, a takeover's half-close and close, the loss
reported to the driver), which a fresh broker's first takeover storm spent
a quarter of its CPU compiling: `warm_up_sockets` runs that once the loop
runs, before the real listeners open, with loopback clients that take one
client id over from each other through a hub of a broker of its own.

When rates are set, it then floods them over loopback too
(_flood_sockets): the release then comes through the server's timer and
the hub's pause and resume, each called from the loop, as in the real
broker.

On an interpreter without a JIT (CPython) it does nothing. [server]
warm_up = false skips it (on PyPy a start-up up to BUDGET_S sooner).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import time
from typing import Any, Callable

from common.driver import Driver
from common.mqtt import consts as C
from common.mqtt.client_packets import encode_connect, encode_subscribe
from common.mqtt.packets import Connect, Disconnect, PubAck, Publish, Subscribe, encode_packet
from common.store.store import StoreError
from common.store.storeboot import new_broker
from common.turns import Turns

# Rounds of the exercise (one client each): enough for PyPy's thresholds
# (1,619 runs of a function or loop, counters that decay) on every path it takes.
ROUNDS = 2500
# It stops sooner after this many seconds (a slow machine).
BUDGET_S = 5.0
# Clients that connect together, as a poll of the hub hands over many
# sockets' input before one flush: the driver's and the broker's loops over
# connections (flush, next_dirty, the lingers) run with many in them, as
# they do when a restarted broker's clients come back.
BATCH = 16


def has_jit() -> bool:
    """Whether this interpreter compiles hot code as it runs (PyPy's JIT)."""
    return importlib.util.find_spec("pypyjit") is not None


class _Sink:
    """A connection handle that takes everything and sends nothing; it
    tells whether the driver paused its reading, and how often it resumed it."""

    __slots__ = ("closed", "paused", "resumed")

    def __init__(self) -> None:
        self.closed = False
        self.paused = False
        self.resumed = 0

    def write(self, data: Any) -> None:
        pass

    def half_close(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pending(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False
        self.resumed += 1


def _packets(n: int, level: int, stored: bool = False) -> list[bytes]:
    """What client `n` sends in a round: CONNECT, SUBSCRIBE, a PUBLISH of each QoS, PUBREL, PUBACK.

    Client ids and topics of many lengths, each client a topic of its own
    (a new leaf of the topic tree, removed when its clean session ends):
    code compiled for one length of string, or for a tree that no longer
    grows, would meet real clients with guards that fail. `stored`: every
    other client's session outlives its connection (the store's paths).

    Its QoS 0 and 1 PUBLISHes are retained, and every client of an even `n`
    (those that leave in their own batch: warm_up's `how`) also subscribes
    to its group's topics, or (one in four of them) to "#", at QoS 0: the
    retained replay a SUBSCRIBE starts (common/broker/replay.py) runs
    through dozens to hundreds of retained messages, as it does for each
    client of a restarted broker that subscribes again (cold, a fresh PyPy
    broker sent a "#" subscriber its first retained message of 10,000
    after 6 ms, warm after 1: docs/benchmarks.md)."""
    pad = "x" * (n % 29)
    cid = f"warm-{level}-{n}-{pad}"
    topic = f"warm/{n % 7}/{pad}/{n}"
    persistent = stored and n % 2 == 1
    props = [(C.PROP_SESSION_EXPIRY_INTERVAL, 60 if persistent else 0)] if level == C.LEVEL_5 else None
    connect = Connect(level, level == C.LEVEL_5 or not persistent, 60, cid, props=props)
    filters = [(topic, 1)]
    if n % 2 == 0:
        filters.append(("#" if n % 8 == 0 else f"warm/{n % 7}/#", 0))
    return [
        encode_connect(connect, level),
        encode_subscribe(Subscribe(1, filters), level),
        encode_packet(Publish(topic, b"warm-up", 0, retain=True), level)
        + encode_packet(Publish(topic, b"warm-up", 1, retain=True, packet_id=2), level)
        + encode_packet(Publish(topic, b"warm-up", 2, packet_id=3), level),
        encode_packet(PubAck(C.PUBREL, 3), level),
        encode_packet(PubAck(C.PUBACK, 1), level),  # its own QoS 1 copy's (the first packet id it was given)
    ]


class _Shell:
    """What the hub does with a connection's input, in memory (server.py BrokerServer.input)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.turns = Turns(driver)
        self.buf = bytearray(4096)  # (a flooder's read: FLOOD_READ PUBLISHes)
        self.view = memoryview(self.buf)

    def input(self, cid: int, data: bytes) -> None:
        # Read into one buffer, handed over as a memoryview (epoll_hub.py;
        # code compiled for bytes would not serve).
        n = len(data)
        self.buf[:n] = data
        if self.turns.input(cid, self.view[:n]):
            self.driver.flush()

    def end_poll(self) -> None:
        if self.turns.due:
            self.turns.end_turn()

    def lost(self, cid: int) -> None:
        # The shell's order (server.py BrokerServer.lost).
        self.turns.run_now(cid)
        self.driver.connection_lost(cid)
        self.turns.forget(cid)


def _quiet_broker(
    settings: Any, make_driver: Callable[[Any], Driver], security: tuple[Any, ...], store: Any = None
) -> tuple[Any, Driver]:
    """A broker of the warm-up's own and its driver, made as the real ones
    are (make_driver, the real security), its logger's level above all."""
    broker = new_broker(settings, os.urandom, store)
    driver = make_driver(broker)
    broker.set_logger(broker.logger, 100)
    driver.set_security(*security)
    if store is not None:
        driver.restore(int(time.time()))
    return broker, driver


# The rate limits' hold and release (_flood): this many clients publish
# QoS 0 over their rates, FLOOD_READ PUBLISHes a read, until RELEASES
# releases in all or FLOOD_BUDGET_S; none held after FLOOD_UNHELD PUBLISHes
# (rates above about FLOOD_UNHELD / FLOODERS a second): it ends there.
FLOODERS = 8
FLOOD_READ = 64
RELEASES = 2000
FLOOD_BUDGET_S = 1.0
FLOOD_UNHELD = 50_000


def _flood_client(n: int) -> tuple[bytes, bytes]:
    """Flood client `n`'s CONNECT and what it sends at a time: FLOOD_READ
    PUBLISHes at QoS 0, or for n == FLOODERS (the client within its rate)
    one at QoS 1."""
    level = C.LEVEL_5 if n % 2 else C.LEVEL_311
    topic = f"warm/flood/{n}"
    if n < FLOODERS:
        read = b"".join(encode_packet(Publish(topic, b"flood", 0), level) for _ in range(FLOOD_READ))
    else:
        read = encode_packet(Publish(topic, b"within", 1, packet_id=1), level)
    return encode_connect(Connect(level, True, 60, f"warm-flood-{n}"), level), read


def _flood(settings: Any, make_driver: Callable[[Any], Driver], security: tuple[Any, ...]) -> int:
    """Clients over their rate limits, held back and read again a slice at
    a time by the driver's tick on the real clock (a release is due a step
    of 2-20 ms after the last: ratelimit.py), beside one within its rate
    that publishes at QoS 1 once each step; the releases made. On a broker
    of its own: warm_up's clients leave a listener's or a user's shared
    bucket seconds in debt."""
    started = time.monotonic()
    driver = _quiet_broker(settings, make_driver, security)[1]
    shell = _Shell(driver)
    clients = []
    for n in range(FLOODERS + 1):
        sink = _Sink()
        cid = driver.connection_made(sink, ("127.0.0.1:1", None, True))
        if cid < 0:
            break  # (beyond max_connections)
        connect, read = _flood_client(n)
        shell.input(cid, connect)
        clients.append((cid, sink, read))
    shell.end_poll()
    driver.flush()
    flooders = clients[:FLOODERS]
    within = clients[FLOODERS] if len(clients) > FLOODERS else None
    sent = 0
    released = 0
    step_seen = 0
    while released < RELEASES and time.monotonic() - started < FLOOD_BUDGET_S:
        held = 0
        for cid, sink, read in flooders:
            if sink.paused:
                held += 1
            else:
                shell.input(cid, read)
                sent += FLOOD_READ
        if not held and sent >= FLOOD_UNHELD:
            break  # (rates no flood of this size reaches)
        released = 0
        for _, sink, _ in flooders:
            released += sink.resumed
        if within is not None and released != step_seen:  # (a step went by)
            step_seen = released
            shell.input(within[0], within[2])
        shell.end_poll()
        driver.flush()
        driver.tick()
    for cid, _, _ in flooders:
        shell.lost(cid)
    if within is not None:
        shell.lost(within[0])
    return released


# The warm-up's own store: a directory of the data directory named so.
SCRATCH_PREFIX = ".warm-up-"


def _scratch_store(data_dir: str, encrypted: bool) -> tuple[Any, str]:
    """A store of the warm-up's own in a new directory of `data_dir` (the
    real store's file system), sealed with a fresh key when the real one
    is sealed: (the store, its directory), or (None, "") if it cannot be
    made (a full disk): the warm-up then goes without. One that a start
    cut short left behind (a kill -9) is removed first."""
    from cpython_host.runtime.storage import open_store

    where = ""
    try:
        for name in os.listdir(data_dir):
            if name.startswith(SCRATCH_PREFIX):
                shutil.rmtree(os.path.join(data_dir, name), ignore_errors=True)
        where = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=data_dir)
        return open_store(where, os.urandom(32).hex() if encrypted else None), where
    except (OSError, StoreError):
        if where:
            shutil.rmtree(where, ignore_errors=True)
        return None, ""


def warm_up(
    settings: Any,
    make_driver: Callable[[Any], Driver],
    security: tuple[Any, ...],
    rounds: int = ROUNDS,
    budget_s: float = BUDGET_S,
    store_in: tuple[str, bool] | None = None,
) -> tuple[int, float, int] | None:
    """Run the core's connection paths for `rounds` clients (at most
    `budget_s` seconds), then, when rates are set, clients over them
    (_flood); (clients run, seconds, rate-limit releases), or None without
    a JIT.
    `store_in`: (the data directory, whether the store is sealed) when the
    real broker has a store: the warm-up's broker then has one of its own
    there (removed after), and half its clients' sessions are persistent,
    so the store's paths are compiled too (a fresh PyPy broker ran its first
    durable seconds at two thirds of its later speed: docs/benchmarks.md).

    `make_driver(broker)` is the real broker's (serve.py), and `security`
    its users, ACL and anonymous switch: the compiled code checks which
    function a call reaches (the clock, the logger) and which objects a
    check meets; the warm-up's must be the real broker's, or its first
    clients would find guards that fail and wait while the JIT compiles
    the other branch. Nothing is logged (the logger's level is above all).
    Its garbage is collected before it returns: a major collection would
    otherwise come in the middle of the first clients' connects."""
    if not has_jit():
        return None
    started = time.monotonic()
    store, scratch = _scratch_store(*store_in) if store_in is not None else (None, "")
    broker, driver = _quiet_broker(settings, make_driver, security, store)
    shell = _Shell(driver)
    scripts = [_packets(n, level, store is not None) for n in range(256) for level in (C.LEVEL_311, C.LEVEL_5)]
    disconnect = {level: encode_packet(Disconnect(), level) for level in (C.LEVEL_311, C.LEVEL_5)}
    live: list[tuple[int, _Sink]] = []
    done = 0
    while done < rounds and time.monotonic() - started < budget_s:
        batch = []
        for i in range(done, done + BATCH):
            sink = _Sink()
            cid = driver.connection_made(sink, ("127.0.0.1:1", None, True))
            if cid >= 0:  # (else beyond max_connections: the live ones go first)
                batch.append((i, cid, sink))
        # Each packet of the script from every client of the batch, one poll each.
        for step in range(5):
            for i, cid, _ in batch:
                shell.input(cid, scripts[i % len(scripts)][step])
            shell.end_poll()
        # A client leaves politely, is dropped, or stays until a later
        # batch's client with its id takes its session over.
        for i, cid, sink in batch:
            how = i % 4
            if how == 0:
                shell.input(cid, disconnect[C.LEVEL_5 if i % 2 else C.LEVEL_311])
            if how < 2:
                shell.lost(cid)
            else:
                live.append((cid, sink))
        shell.end_poll()
        driver.flush()
        for cid, sink in [x for x in live if x[1].closed]:
            live.remove((cid, sink))
            shell.lost(cid)
        driver.tick()
        done += BATCH
    for cid, _ in live:
        shell.lost(cid)
    if store is not None:
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)
    rated = broker.rates is not None
    del broker, driver, shell, scripts, live, store
    released = _flood(settings, make_driver, security) if rated else 0
    elapsed = time.monotonic() - started
    gc.collect()
    return done, elapsed, released


# The socket warm-up: clients that share one client id and take its
# session over from each other, as many at once, for at most this long.
TAKERS = 4
SOCKETS_BUDGET_S = 2.0
TAKEOVERS = 1500
# Then, when rates are set, FLOODERS clients over them for this long beside
# one within them (one QoS 1 PUBLISH each WITHIN_EVERY_S): the release
# comes through the server's timer (Driver.wake, BrokerServer._on_timer)
# and the hub's pause and resume, called from the loop, so the JIT compiles
# them on their own (in memory, _flood's loop calls the driver itself).
FLOOD_SOCKETS_S = 1.5
WITHIN_EVERY_S = 0.002
# Nobody held back after this long (rates the flood does not reach): it ends.
FLOOD_UNHELD_S = 0.5


async def _loopback_client(loop: asyncio.AbstractEventLoop, address: Any, connect: bytes) -> socket.socket:
    """A non-blocking client socket that sent `connect` to `address` and
    read its CONNACK (closed if that failed)."""
    s = socket.socket()
    s.setblocking(False)
    try:
        await loop.sock_connect(s, address)
        await loop.sock_sendall(s, connect)
        await loop.sock_recv(s, 256)  # its CONNACK (3.1.1: 4 bytes; v5: with its properties)
    except BaseException:
        s.close()
        raise
    return s


async def _flood_sockets(loop: asyncio.AbstractEventLoop, address: Any, broker: Any) -> int:
    """FLOODERS loopback clients publish QoS 0 as fast as `broker` reads
    them, beside one at QoS 1 within its rate, for FLOOD_SOCKETS_S (or
    FLOOD_UNHELD_S if `broker` held none of them back); the PUBACKs the
    one within got."""
    started = time.monotonic()
    end = started + FLOOD_SOCKETS_S
    acked = [0]

    async def client(n: int) -> None:
        connect, read = _flood_client(n)
        s = await _loopback_client(loop, address, connect)
        try:
            if n < FLOODERS:
                while time.monotonic() < end:
                    await loop.sock_sendall(s, read)  # (waits while the broker holds it back)
                return
            while time.monotonic() < end:
                await loop.sock_sendall(s, read)
                if not await loop.sock_recv(s, 16):  # its PUBACK
                    return
                acked[0] += 1
                await asyncio.sleep(WITHIN_EVERY_S)
        finally:
            s.close()

    tasks = [loop.create_task(client(n)) for n in range(FLOODERS + 1)]
    held = False
    try:
        while not all(t.done() for t in tasks) and time.monotonic() < end + 1.0:
            await asyncio.sleep(0.05)
            held = held or bool(broker.throttled)
            if not held and time.monotonic() - started > FLOOD_UNHELD_S:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return acked[0]


async def warm_up_sockets(
    config: Any, make_driver: Callable[[Any], Driver], security: tuple[Any, ...]
) -> tuple[int, float, int] | None:
    """The shell's socket code (epoll_hub.py: accept, read, write, the
    half-close and close of a taken-over connection, the loss reported to
    the driver), which warm_up cannot reach in memory: loopback clients
    take one client id over from each other through a hub of a broker of
    its own, on the running loop, before the real listeners open; then,
    when rates are set, clients over them (_flood_sockets). (takeovers,
    seconds, PUBACKs of the client within its rate beside the flood), or
    None without a JIT or a plain MQTT listener on the hub."""
    from cpython_host.server import BrokerServer
    from cpython_host.transports import epoll_hub
    from cpython_host.transports.listeners import bind

    plain = any(not (lst.tls or lst.websockets or lst.mqttsn) for lst in config.listeners())
    if not has_jit() or not (plain and epoll_hub.AVAILABLE and config.epoll_hub):
        return None
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    broker, driver = _quiet_broker(config.settings, make_driver, security)
    server = BrokerServer(driver, config, {})
    hub = epoll_hub.EpollHub(server, loop)
    lsock = bind("127.0.0.1", 0, 128)[0]
    hub.listen(server.listening[0], lsock)
    address = lsock.getsockname()
    connect = encode_connect(Connect(C.LEVEL_311, True, 60, "warm-takeover"), C.LEVEL_311)
    done = [0]
    end = started + SOCKETS_BUDGET_S

    async def taker() -> None:
        while done[0] < TAKEOVERS and time.monotonic() < end:
            s = await _loopback_client(loop, address, connect)
            try:
                done[0] += 1
                while await loop.sock_recv(s, 64):  # until the broker closes it (taken over)
                    pass
            finally:
                s.close()

    tasks = [loop.create_task(taker()) for _ in range(TAKERS)]
    flooded = 0
    try:
        # (the last holder is never taken over: its wait ends here)
        while done[0] < TAKEOVERS and time.monotonic() < end and not all(t.done() for t in tasks):
            await asyncio.sleep(0.02)
        if driver.broker.rates is not None:
            server.start_timer()  # (the release's tick)
            flooded = await _flood_sockets(loop, address, driver.broker)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        server.stop_timer()
        hub.unlisten(lsock)
        lsock.close()
        driver.abort_all()
        await asyncio.sleep(0)  # the hub reports the losses on the next turn
        hub.close()
    elapsed = time.monotonic() - started
    del broker, driver, server, hub
    gc.collect()
    return done[0], elapsed, flooded


if __name__ == "__main__":  # python -m cpython_host.runtime.warmup: how long the in-memory part takes here
    # (Not serve.make_driver: serve.py imports this module. The clock is the host's.)
    from cpython_host.config import load_config, load_security
    from cpython_host.server import ticks_ms

    cfg = load_config(None)
    made = warm_up(
        cfg.settings, lambda b: Driver(b, ticks_ms, cfg.close_linger, cfg.shutdown_timeout), load_security(cfg)
    )
    print(made, file=sys.stderr)
