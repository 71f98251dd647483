"""The asyncio server: a socket adapter for the core's connection driver.

Theory of operation
-------------------
Every decision lives in the core: the Broker (common/broker/broker.py)
makes the MQTT ones, the Driver (common/driver.py) those of the
connection's life, common/turns.py the fairness between connections. This
module moves bytes and time. A socket on asyncio's transports gets a
`ClientProtocol` (cpython_host/transports/client_protocol.py: callbacks, no streams,
no per-read task), which is also the driver's handle for that connection. Every read goes
through turns.input(); the shell flushes when it says so (as soon as an
input is handled: libuv reads a readable socket up to 32 times in one go,
and waiting for the end of the turn would let a firehose publisher pile
megabytes of output before a write could report backpressure) and runs
turns.end_turn() at the end of the loop turn when `turns.due`. It reads no
private field of the event loop. One TimerHandle is re-armed to the delay
driver.tick() returns. The transport's write buffer has high/low water
marks ([server] write_buffer_high/low): pause_writing/resume_writing become
driver.set_paused (docs/host.md).

Plain MQTT listeners are served without asyncio's transports, by
cpython_host/transports/epoll_hub.py: its PlainConnection is their handle. Every
transport reports to BrokerServer through the small interface of
cpython_host/transports/events.py (connection_made, input, eof, lost, end, set_paused,
flush_soon, rearm_timer, ...), which it implements here; none imports this
module or writes into the server. The listeners (plain and TLS accept) are cpython_host/transports/listeners.py's;
SIGHUP's reloads, reload.py's; running it all (signals, start-up lines,
systemd), serve.py's. A websockets listener gives each socket a
WebSocketClient (cpython_host/transports/websocket.py): this ClientProtocol with
wsproto in front.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

from common.driver import Driver
from common.turns import Turns
from cpython_host.config import HostConfig, Listener
from cpython_host.transports.client_protocol import ClientProtocol
from cpython_host.transports.listeners import (
    Accepting,
    Listening,
    close_listeners,
    listeners_closed,
    open_listeners,
)

log = logging.getLogger("siskin.host")


def ticks_ms() -> int:
    """The host's millisecond clock for the driver (it masks and wraps it)."""
    return int(time.monotonic() * 1000)


def client_class(config: Listener) -> type[ClientProtocol]:
    """What each socket a listener accepts gets: MQTT over TCP, or over
    WebSockets (imported only then: wsproto is needed only by such a listener)."""
    if config.websockets:
        from cpython_host.transports.websocket import WebSocketClient

        return WebSocketClient
    return ClientProtocol


class BrokerServer:
    """Owns the listeners, the timer and the driver around the broker; the
    transports' ConnectionEvents (cpython_host/transports/events.py)."""

    def __init__(self, driver: Driver, config: HostConfig, contexts: dict[int, ssl.SSLContext]) -> None:
        self.driver = driver
        self.broker = driver.broker
        self.settings = driver.broker.settings
        self.config = config
        self.write_high = config.write_buffer_high
        self.write_low = config.write_buffer_low
        self.all_closed = asyncio.Event()
        self.flush_scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.debug = log.isEnabledFor(logging.DEBUG)
        self.turns = Turns(driver)  # fairness between connections (common/turns.py)
        self.turn_scheduled = False
        listeners = config.listeners()
        self.listening = [Listening(lst, contexts.get(i), client_class(lst)) for i, lst in enumerate(listeners)]
        self.ticks_ms = ticks_ms  # the clock of an accept (listeners.py)
        self.timer: asyncio.TimerHandle | None = None
        # A rate hold's release is due before the timer (Driver.wake): tick
        # on the next loop turn, not from inside the driver's flush.
        driver.wake = lambda: self.call_soon(self.rearm_timer)
        self.stopping = asyncio.Event()
        self.bridges: Any = ()  # cpython_host/bridge.py Bridges: a Runner per [[bridge]] (common/bridge/runner.py)
        self.accepting: Accepting | None = None  # the listeners' hub and handshakes, once open

    def log_level_changed(self) -> None:
        """The host's log level changed (SIGHUP): connections logged one by one or not."""
        self.debug = log.isEnabledFor(logging.DEBUG)

    def request_stop(self) -> None:
        """A signal: serve() shuts down."""
        self.stopping.set()

    def note_closed(self) -> None:
        """A connection of the server's own ended (a bridge's at shutdown): the last one?"""
        if not self.driver.open:
            self.all_closed.set()

    # ------------------------------------------ a connection's events
    # (events.py's ConnectionEvents: what the transports report)

    def connection_made(self, handle: Any, peer: tuple[str, str | None, bool, int], accepted: int | None = None) -> int:
        cid: int = self.driver.connection_made(handle, peer, accepted)
        return cid

    def tls_failed(self) -> None:
        self.driver.tls_failed()

    def set_paused(self, cid: int, paused: bool) -> None:
        self.driver.set_paused(cid, paused)

    def end(self, cid: int) -> None:
        self.turns.run_now(cid)  # what it sent before its end goes first
        self.driver.close(cid)
        self.schedule_flush()

    def websocket_refused(self) -> None:
        self.broker.stats.websocket_refused += 1

    def is_stopping(self) -> bool:
        return self.stopping.is_set()

    def input(self, cid: int, data: Any) -> None:
        """Bytes read from connection `cid` (valid during the call)."""
        turns = self.turns
        if turns.input(cid, data):
            self.flush()
        if turns.due:
            self.schedule_turn()

    def eof(self, cid: int, can_wait: bool) -> bool:
        """The peer of `cid` closed its sending side: whatever the core still
        has for it goes out first. True: keep the socket open, its input
        waits for its turn and it is closed after it (`can_wait`: a socket
        that can stay half-open; a TLS one closes now, its input first)."""
        turns = self.turns
        if turns.waits(cid):
            if can_wait:
                turns.close_after(cid)
                return True
            turns.run_now(cid)
        if self.driver.wants_flush():
            self.flush()
        return False

    def lost(self, cid: int, peer: str, exc: Exception | None) -> None:
        """The socket of `cid` is closed."""
        turns = self.turns
        turns.run_now(cid)  # what it sent before it went is not lost
        driver = self.driver
        driver.connection_lost(cid)
        turns.forget(cid)
        if self.debug:
            log.debug("connection #%d from %s closed%s", cid, peer, f" ({exc})" if exc else "")
        if driver.wants_flush():
            self.schedule_flush()  # a will published, a throttled publisher released...
        if not driver.open:
            self.all_closed.set()

    # -------------------------------------------------------------- output

    def flush_soon(self) -> None:
        self.schedule_flush()

    def schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.driver.flush():
            # A retained replay can go on (its client's output drained):
            # again on the next loop turn, the other clients' I/O in between.
            self.schedule_flush()

    # ---------------------------------------------------------------- turns

    def schedule_turn(self) -> None:
        if not self.turn_scheduled:
            self.turn_scheduled = True
            self.call_soon(self.next_turn)

    def next_turn(self) -> None:
        # After the input read in this loop turn (common/turns.py): the input
        # put off, one flush; again next turn while input waits.
        self.turn_scheduled = False
        if self.turns.end_turn():
            self.schedule_turn()

    def call_soon(self, callback: Any) -> None:
        # The loop is cached: asyncio.get_running_loop() costs a getpid()
        # system call on every call.
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        loop.call_soon(callback)

    # ---------------------------------------------------------------- timer

    def _on_timer(self) -> None:
        delay = self.driver.tick()
        assert self.loop is not None
        self.timer = self.loop.call_later(delay / 1000, self._on_timer)

    def rearm_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self._on_timer()

    def start_timer(self) -> None:
        """Run the driver's tick from now on, on the running loop."""
        self.loop = asyncio.get_running_loop()
        self._on_timer()

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open every listener (listeners.py; OSError naming the one that
        failed), start the timer and the bridges."""
        self.loop = asyncio.get_running_loop()
        self.accepting = await open_listeners(self, self.listening)
        self.start_timer()  # starts the uptime clock and the first $SYS
        from cpython_host.bridge import Bridges  # (its code: the bridge's runner and client)

        self.bridges = Bridges(self)
        self.bridges.start(self.config.bridges)

    async def shutdown(self, reason: str) -> None:
        driver = self.driver
        log.info("shutting down (%s): closing the listeners and %d connection(s)", reason, driver.open)
        started = time.monotonic()
        close_listeners(self.listening)
        if self.bridges:
            await self.bridges.stop()
        if self.accepting is not None:
            for task in list(self.accepting.handshakes):
                task.cancel()  # connect_accepted_socket closes its socket
        wait_ms = driver.shutdown()  # the timer keeps running: it ends the lingers
        if driver.open:
            self.all_closed.clear()
            try:
                await asyncio.wait_for(self.all_closed.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                driver.abort_all()
                await asyncio.sleep(0)
        self.stop_timer()
        await listeners_closed(self.listening)
        if self.accepting is not None:
            self.accepting.close()
        log.info("shutdown complete in %.2f s", time.monotonic() - started)
