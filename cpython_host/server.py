"""The asyncio server that serves the sans-I/O core on real sockets.

Theory of operation
-------------------
One `Broker` (common/broker.py) holds every MQTT decision; this module only
moves bytes and time. Each accepted socket gets a `ClientProtocol`
(asyncio.Protocol: callbacks, no stream objects, no per-read task):

    connection_made  broker.connection_made(now) -> cid (-1: close at once)
    data_received    broker.data_received(cid, data, now), then a flush is
                     scheduled for the end of this loop turn
    eof/lost         broker.connection_lost(cid, now) once the socket is gone

The flush (`BrokerServer.flush`) runs once per loop turn in which anything
happened (call_soon), so everything the broker produced for a connection
during that turn, from any number of publishers, goes out in ONE
transport.write. (After input on asyncio's own loop, when data_received was
the turn's last callback, the flush runs at once instead: the same writes,
one loop iteration sooner; see flush_after_input.) For every cid in broker.take_dirty(): write
broker.take_output(cid); if broker.is_closing(cid), start the close:

    write what is left -> write_eof() (half-close, FIN after the buffer
    drains) -> keep reading and discarding input until the peer's EOF or
    `close_linger` s -> close (abort if the buffer still cannot drain) ->
    broker.connection_lost(cid).

Closing gracefully matters: closing a socket with unread input makes the
kernel send a RST, which can destroy a final CONNACK (refusal) or v5
DISCONNECT still in flight to the peer.

A 1-second timer calls broker.tick(now), publishes $SYS when due, and
flushes. `now` is int(time.monotonic()): whole seconds, as the core wants.

Backpressure
------------
The transport's write buffer has a high/low water mark ([server]
write_buffer_high/low). Above high, asyncio calls pause_writing(): we tell
the core (broker.set_paused(cid, True)); it then keeps that client's output
to itself (take_output returns None), drops QoS 0 for it beyond
max_out_buffer (counted), and queues QoS 1/2 in the session (bounded by
max_inflight, max_queued_messages/bytes). So a slow reader costs at most
about write_buffer_high + max_out_buffer + its inflight window of memory,
and never slows anyone else: no write ever blocks.

We also pause READING from a client whose output is paused, and resume when
its output drains (resume_writing). Why: a client that keeps sending
(QoS 1/2 PUBLISH, PINGREQ, SUBSCRIBE) while never reading makes the core
append acknowledgements to its output without bound; not reading it pushes
TCP flow control back onto that client instead, so its memory stays bounded
too. The cost is that a client that reads nothing for 1.5 x its keep-alive
is closed by the keep-alive timer (its PINGREQs sit unread in the kernel);
a client that reads slowly but steadily keeps resuming and is not affected.

Shutdown (SIGINT/SIGTERM): stop listening, broker.shutdown(now) (v5 clients
get DISCONNECT 0x8B; no wills), flush, half-close every connection, wait up
to `shutdown_timeout` s for them to finish, abort the rest, exit 0.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import time
from typing import Any

from common.broker import VERSION, Broker
from common.persist import Persist
from common.store import Store
from cpython_host.config import HostConfig
from cpython_host.sys_topics import SysPublisher

log = logging.getLogger("siskin.host")
core_log = logging.getLogger("siskin.core")


def monotonic_seconds() -> int:
    return int(time.monotonic())


class ClientProtocol(asyncio.Protocol):
    """One accepted connection; a thin adapter between a transport and the core."""

    __slots__ = ("cid", "closing", "linger_handle", "peername", "server", "transport")

    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.transport: Any = None
        self.cid = -1
        self.closing = False  # the close procedure has started: input is discarded
        self.linger_handle: asyncio.TimerHandle | None = None
        self.peername: Any = None  # (host, port); formatted only for the log

    @property
    def peer(self) -> str:
        p = self.peername
        return f"{p[0]}:{p[1]}" if p else "?"

    # -------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        server = self.server
        self.peername = transport.get_extra_info("peername")
        cid = server.broker.connection_made(monotonic_seconds())
        if cid < 0:
            # Far beyond max_connections: not even a polite CONNACK.
            log.warning("refused connection from %s: too many connections", self.peer)
            self.transport.abort()
            return
        self.cid = cid
        # No setsockopt(TCP_NODELAY) here: asyncio and uvloop both set it on
        # every TCP transport they make (checked on both), and a connection
        # storm pays for every system call.
        transport.set_write_buffer_limits(server.write_high, server.write_low)  # type: ignore[attr-defined]
        server.protocols[cid] = self
        if server.debug:
            log.debug("connection #%d from %s opened", cid, self.peer)

    def data_received(self, data: bytes) -> None:
        if self.closing or self.cid < 0:
            return  # draining before close: the core wants no more input
        server = self.server
        try:
            server.broker.data_received(self.cid, data, monotonic_seconds())
        except Exception:
            # The core turns every bad input into a close by itself; an
            # exception here is a bug in the core. Contain it to this
            # connection so that every other client carries on.
            log.exception("core error on connection #%d from %s; aborting it", self.cid, self.peer)
            self.closing = True
            self.transport.abort()
        server.flush_after_input()

    def eof_received(self) -> bool:
        # The peer closed its sending side. For MQTT that ends the network
        # connection; whatever the core still has for it goes out first,
        # then asyncio closes the transport (returning False).
        if not self.closing and self.cid >= 0:
            self.server.flush()
        return False

    def pause_writing(self) -> None:
        if self.cid < 0 or self.closing:
            return
        self.server.broker.set_paused(self.cid, True)
        self.transport.pause_reading()  # see "Backpressure" above

    def resume_writing(self) -> None:
        if self.cid < 0 or self.closing:
            return
        self.server.broker.set_paused(self.cid, False)
        self.transport.resume_reading()
        self.server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.linger_handle is not None:
            self.linger_handle.cancel()
            self.linger_handle = None
        cid = self.cid
        if cid < 0:
            return
        self.cid = -1
        server = self.server
        if server.protocols.get(cid) is self:
            del server.protocols[cid]
        try:
            server.broker.connection_lost(cid, monotonic_seconds())
        except Exception:  # a core bug; see data_received
            log.exception("core error closing connection #%d from %s", cid, self.peer)
        if server.debug:
            log.debug("connection #%d from %s closed%s", cid, self.peer, f" ({exc})" if exc else "")
        server.schedule_flush()  # a will may have been published
        if not server.protocols:
            server.all_closed.set()

    # ------------------------------------------------------------ closing

    def start_close(self) -> None:
        """Half-close after the last output, drain input for a while, then close."""
        if self.closing:
            return
        self.closing = True
        transport = self.transport
        if transport.is_closing():
            return
        transport.resume_reading()  # read (and discard) until the peer's EOF
        if transport.can_write_eof():
            transport.write_eof()
            self.linger_handle = asyncio.get_running_loop().call_later(self.server.close_linger, self._linger_over)
        else:  # pragma: no cover - TLS transports cannot half-close
            transport.close()

    def _linger_over(self) -> None:
        # The peer neither closed its side nor read its output in time.
        # Output still buffered means the peer is not reading: close() would
        # wait for it forever, so abort.
        self.linger_handle = None
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()


class BrokerServer:
    """Owns the listener, the connections, the clock task and the broker."""

    def __init__(self, broker: Broker, config: HostConfig) -> None:
        self.broker = broker
        self.config = config
        self.write_high = config.write_buffer_high
        self.write_low = config.write_buffer_low
        self.close_linger = config.close_linger
        self.protocols: dict[int, ClientProtocol] = {}
        self.all_closed = asyncio.Event()
        self.flush_scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # asyncio's queue of callbacks still to run in this loop turn (a
        # deque in BaseEventLoop); None for loops that do not expose it.
        self.ready: Any = None
        self.debug = log.isEnabledFor(logging.DEBUG)
        self.sys = SysPublisher(broker, broker.settings.sys_interval)
        self.listener: asyncio.Server | None = None
        self.clock_task: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()
        broker.set_logger(self._core_logger, core_log.getEffectiveLevel())

    @staticmethod
    def _core_logger(level: int, text: str) -> None:
        core_log.log(level, "%s", text)

    # -------------------------------------------------------------- output

    def schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            # The loop is cached: asyncio.get_running_loop() costs a getpid()
            # system call on every call.
            loop = self.loop
            if loop is None:
                loop = self.loop = asyncio.get_running_loop()
            loop.call_soon(self.flush)

    def flush_after_input(self) -> None:
        """End of a data_received: flush now if it was the loop turn's last callback.

        asyncio's loop runs the callbacks of one select() from its `_ready`
        deque; when that is empty, nothing else runs before the next select(),
        so flushing now writes exactly what a call_soon flush would, one loop
        iteration (a select() and a callback) sooner: about a tenth of the
        cost of a PUBLISH -> PUBACK round trip. Otherwise (more input in this
        turn) the flush waits for the end of the turn, so output from many
        inputs still goes out in one write per connection.

        On loops that hide their queue (uvloop), every input is flushed at
        once: libuv reads a readable socket up to 32 times in one go, so
        waiting for the end of the turn would let a firehose publisher pile
        megabytes into the subscribers' output lists before any write could
        report backpressure (pause_writing): tests/host/test_server_backpressure.py
        fails that way. uvloop's writes are cheap enough to pay per input.
        """
        ready = self.ready
        if ready is None or (not ready and not self.flush_scheduled):
            self.flush()
        else:
            self.schedule_flush()

    def flush(self) -> None:
        """Write each dirty connection's output once; start closes the core asked for."""
        self.flush_scheduled = False
        broker = self.broker
        protocols = self.protocols
        for cid in broker.take_dirty():
            proto = protocols.get(cid)
            data = broker.take_output(cid)
            if proto is None or proto.closing:
                continue  # gone, or already half-closed: nothing more may go out
            if data:
                proto.transport.write(data)
            if broker.is_closing(cid):
                proto.start_close()

    # ---------------------------------------------------------------- clock

    async def _clock(self) -> None:
        while True:
            # Wake just after each whole second of the monotonic clock.
            t = time.monotonic()
            await asyncio.sleep(1.0 - (t % 1.0) + 0.001)
            now = monotonic_seconds()
            try:
                self.broker.tick(now)
                self.sys.maybe_publish(now)
            except Exception:  # a bug in the core must not stop the clock
                log.exception("broker.tick failed")
            self.flush()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self.loop = loop
        ready = getattr(loop, "_ready", None)
        if isinstance(ready, collections.deque):
            self.ready = ready
        cfg = self.config
        self.listener = await loop.create_server(
            lambda: ClientProtocol(self),
            cfg.host,
            cfg.port,
            backlog=cfg.backlog,
            reuse_address=True,
        )
        now = monotonic_seconds()
        self.broker.tick(now)  # starts the uptime clock
        self.sys.maybe_publish(now)
        self.clock_task = asyncio.create_task(self._clock())
        addr = self.listener.sockets[0].getsockname()
        return addr[0], addr[1]

    async def shutdown(self, reason: str) -> None:
        log.info("shutting down (%s): closing the listener and %d connection(s)", reason, len(self.protocols))
        started = time.monotonic()
        if self.listener is not None:
            self.listener.close()
        if self.clock_task is not None:
            self.clock_task.cancel()
        self.broker.shutdown(monotonic_seconds())
        self.flush()
        for proto in list(self.protocols.values()):
            proto.start_close()  # anything the core did not already close
        if self.protocols:
            self.all_closed.clear()
            try:
                await asyncio.wait_for(self.all_closed.wait(), self.config.shutdown_timeout)
            except TimeoutError:
                log.warning("shutdown: %d connection(s) did not close in time; aborting them", len(self.protocols))
                for proto in list(self.protocols.values()):
                    proto.transport.abort()
                await asyncio.sleep(0)
        if self.listener is not None:
            try:
                await asyncio.wait_for(self.listener.wait_closed(), 1.0)
            except TimeoutError:  # pragma: no cover - every connection is closed by now
                pass
        log.info("shutdown complete in %.2f s", time.monotonic() - started)


def make_broker(config: HostConfig, store: Store | None = None) -> Broker:
    """The core, sized from the settings; ValueError for settings it refuses.

    With a `store` (cpython_host/storage.py), call broker.restore() before serving.
    """
    return Broker(config.settings, os.urandom, Persist(store) if store is not None else None)


async def _sync_every(broker: Broker, interval: float) -> None:
    """store_sync = batch: make the store durable every `interval` s."""
    while True:
        await asyncio.sleep(interval)
        broker.sync_store()


async def serve(config: HostConfig, broker: Broker, data_dir: str | None) -> int:
    """Run the broker until SIGINT/SIGTERM; the process exit code."""
    server = BrokerServer(broker, config)
    loop = asyncio.get_running_loop()
    try:
        host, port = await server.start()
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", config.host, config.port, e.strerror or e)
        return 1
    stop_reason: list[str] = []

    def on_signal(name: str) -> None:
        if not stop_reason:
            stop_reason.append(name)
            server.stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)
    loop_name = type(loop).__module__.split(".")[0]
    log.info(
        "siskin %s listening on %s:%d (MQTT 3.1.1 + 5.0; settings: %s; event loop: %s)",
        VERSION,
        host,
        port,
        config.source,
        loop_name,
    )
    sync_task = None
    if data_dir is not None:
        settings = broker.settings
        log.info("persistent state in %s (store_sync = %s)", data_dir, settings.store_sync)
        if settings.store_sync == "batch":
            sync_task = asyncio.create_task(_sync_every(broker, settings.store_sync_ms / 1000))
    await server.stopping.wait()
    if sync_task is not None:
        sync_task.cancel()
    await server.shutdown(stop_reason[0])
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    return 0
