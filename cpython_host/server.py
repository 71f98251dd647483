"""The asyncio server: a socket adapter for the core's connection driver.

Theory of operation
-------------------
Every decision lives in the core: the Broker (common/broker/broker.py) makes the
MQTT ones, the Driver (common/driver.py) those of the connection's life
(flush, half-close, linger, abort, containment of a core bug, shutdown,
timers, batch sync, $SYS). This module moves bytes and time. Each accepted
socket gets a `ClientProtocol` (asyncio.Protocol: callbacks, no streams, no
per-read task), which is also the driver's handle for that connection:
write / half_close / close / abort / pending / pause_reading are transport
calls.

Flush coalescing (the one decision kept here, because it is about asyncio's
loop): output produced during a loop turn, from any number of inputs, goes
out in ONE transport.write per connection at the end of the turn
(call_soon); after an input that was the turn's last callback on asyncio's
own loop, the flush runs at once instead (see flush_after_input).

Timer: one TimerHandle, re-armed to the delay driver.tick() returns.

Backpressure: the transport's write buffer has high/low water marks
([server] write_buffer_high/low); asyncio's pause_writing/resume_writing
become driver.set_paused (the driver pauses the core's output for that
client and stops reading it; docs/host.md).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import time
from typing import Any

from common.broker.broker import VERSION, Broker
from common.driver import Driver
from common.store.store import Store
from common.store.storeboot import new_broker
from cpython_host.config import HostConfig

log = logging.getLogger("siskin.host")
core_log = logging.getLogger("siskin.core")

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
    _PAGE = 4096


def rss_bytes() -> int | None:
    """Resident set size of this process from /proc/self/statm, or None ($SYS heap/current)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def ticks_ms() -> int:
    """The host's millisecond clock for the driver (it masks and wraps it)."""
    return int(time.monotonic() * 1000)


class ClientProtocol(asyncio.Protocol):
    """One accepted connection: asyncio's protocol and the driver's handle."""

    __slots__ = ("cid", "peername", "server", "transport")

    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.transport: Any = None
        self.cid = -1
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
        cid = server.driver.connection_made(self, (self.peer, None, True))
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
        if server.debug:
            log.debug("connection #%d from %s opened", cid, self.peer)

    def data_received(self, data: bytes) -> None:
        if self.cid >= 0:
            server = self.server
            server.driver.data_received(self.cid, data)
            server.flush_after_input()

    def eof_received(self) -> bool:
        # The peer closed its sending side: whatever the core still has for
        # it goes out first, then asyncio closes the transport (False).
        if self.cid >= 0:
            self.server.flush()
        return False

    def pause_writing(self) -> None:
        if self.cid >= 0:
            self.server.driver.set_paused(self.cid, True)

    def resume_writing(self) -> None:
        if self.cid >= 0:
            self.server.driver.set_paused(self.cid, False)
            self.server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        cid = self.cid
        if cid < 0:
            return
        self.cid = -1
        server = self.server
        server.driver.connection_lost(cid)
        if server.debug:
            log.debug("connection #%d from %s closed%s", cid, self.peer, f" ({exc})" if exc else "")
        server.schedule_flush()  # a will may have been published
        if not server.driver.open:
            server.all_closed.set()

    # ------------------------------------------------ the driver's handle

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def half_close(self) -> None:
        transport = self.transport
        if transport.is_closing():
            return
        transport.resume_reading()  # read (and discard) until the peer's EOF
        if transport.can_write_eof():
            transport.write_eof()
        else:  # pragma: no cover - TLS transports cannot half-close
            transport.close()

    def close(self) -> None:
        self.transport.close()

    def abort(self) -> None:
        self.transport.abort()

    def pending(self) -> int:
        return int(self.transport.get_write_buffer_size())

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()


class BrokerServer:
    """Owns the listener, the timer and the driver around the broker."""

    def __init__(self, driver: Driver, config: HostConfig) -> None:
        self.driver = driver
        self.broker = driver.broker
        self.config = config
        self.write_high = config.write_buffer_high
        self.write_low = config.write_buffer_low
        self.all_closed = asyncio.Event()
        self.flush_scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # asyncio's queue of callbacks still to run in this loop turn (a
        # deque in BaseEventLoop); None for loops that do not expose it.
        self.ready: Any = None
        self.debug = log.isEnabledFor(logging.DEBUG)
        self.listener: asyncio.Server | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.stopping = asyncio.Event()

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
        self.flush_scheduled = False
        if self.driver.flush():
            # A retained replay can go on (its client's output drained):
            # again on the next loop turn, the other clients' I/O in between.
            self.schedule_flush()

    # ---------------------------------------------------------------- timer

    def _on_timer(self) -> None:
        delay = self.driver.tick()
        assert self.loop is not None
        self.timer = self.loop.call_later(delay / 1000, self._on_timer)

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
        self._on_timer()  # starts the uptime clock and the first $SYS
        addr = self.listener.sockets[0].getsockname()
        return addr[0], addr[1]

    async def shutdown(self, reason: str) -> None:
        driver = self.driver
        log.info("shutting down (%s): closing the listener and %d connection(s)", reason, driver.open)
        started = time.monotonic()
        if self.listener is not None:
            self.listener.close()
        wait_ms = driver.shutdown()  # the timer keeps running: it ends the lingers
        if driver.open:
            self.all_closed.clear()
            try:
                await asyncio.wait_for(self.all_closed.wait(), wait_ms / 1000)
            except TimeoutError:
                driver.abort_all()
                await asyncio.sleep(0)
        if self.timer is not None:
            self.timer.cancel()
        if self.listener is not None:
            try:
                await asyncio.wait_for(self.listener.wait_closed(), 1.0)
            except TimeoutError:  # pragma: no cover - every connection is closed by now
                pass
        log.info("shutdown complete in %.2f s", time.monotonic() - started)


def make_driver(config: HostConfig, broker: Broker) -> Driver:
    """The driver around `broker`, with the host's clock and [server] settings."""
    broker.set_logger(_core_logger, core_log.getEffectiveLevel())
    return Driver(broker, ticks_ms, config.close_linger, config.shutdown_timeout, rss_bytes)


def _core_logger(level: int, text: str) -> None:
    core_log.log(level, "%s", text)


def make_broker(config: HostConfig, store: Store | None = None) -> Broker:
    """The core, sized from the settings; ValueError for settings it refuses.

    With a `store` (common/store/storeboot.py), call driver.restore() before serving.
    """
    broker: Broker = new_broker(config.settings, os.urandom, store)
    return broker


async def serve(config: HostConfig, driver: Driver, data_dir: str | None) -> int:
    """Run the broker until SIGINT/SIGTERM; the process exit code."""
    server = BrokerServer(driver, config)
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
    if data_dir is not None:
        log.info("persistent state in %s (store_sync = %s)", data_dir, driver.broker.settings.store_sync)
    await server.stopping.wait()
    await server.shutdown(stop_reason[0])
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    return 0
