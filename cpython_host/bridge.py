"""The host side of a bridge (common/bridge/): the upstream stream and time.

Theory of operation
-------------------
The core Bridge is two sans-I/O clients; common/bridge/link.py's Link joins
its local client to the driver (an in-memory connection) for both shells.
This module adds asyncio: per [[bridge]], one task connects to the upstream
(TCP, or TLS when configured) at the times and addresses the core gives
(Bridge.next_address: failover, back-off with jitter) and reads it; another
waits for the Link's wake-up or the next deadline (keep-alive, connect
timeout, a retry, a paused local connection), pumps the Link and writes the
upstream output; it also publishes the bridge's $SYS every sys_interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from typing import TYPE_CHECKING, Any

from common.bridge.link import Link
from common.bridge.settings import make_bridge
from common.compat import TICKS_MASK, ticks_diff

if TYPE_CHECKING:
    from cpython_host.server import BrokerServer

log = logging.getLogger("siskin.bridge")

READ_SIZE = 65536


def _log(level: int, text: str) -> None:
    log.log(level, "%s", text)


def client_context(b: Any) -> ssl.SSLContext | None:
    """The SSLContext for the upstream (None: plain TCP). `b`: a BridgeSettings."""
    if not (b.tls or b.cafile):
        return None
    ctx = ssl.create_default_context(cafile=b.cafile or None)
    if b.certfile:
        ctx.load_cert_chain(b.certfile, b.keyfile)
    return ctx


def ms() -> int:
    from cpython_host.server import ticks_ms

    return int(ticks_ms() & TICKS_MASK)


class BridgeRunner:
    """One [[bridge]] on the host: its Link and its two tasks."""

    def __init__(self, server: BrokerServer, settings: Any) -> None:
        self.server = server
        self.settings = settings
        self.core = make_bridge(settings, _log, os.urandom)
        self.context = client_context(settings)
        self.woken = asyncio.Event()
        self.link = Link(self.core, server.driver, ms, self.woken.set, self.flush)
        self.writer: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def flush(self) -> None:
        server = self.server
        server.schedule_flush()
        if not server.driver.open:
            server.all_closed.set()  # (at shutdown: the bridge's was the last connection)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self.pumping()), loop.create_task(self.connecting())]

    async def pumping(self) -> None:
        """Pump the Link at each wake-up and deadline; $SYS every sys_interval."""
        link = self.link
        interval = self.server.broker.settings.sys_interval
        loop = asyncio.get_running_loop()
        sys_at = loop.time() + interval
        while True:
            due = link.next_deadline()
            out = link.pump()
            if out and self.writer is not None:
                self.writer.write(out)
            if self.core.close_wanted is not None and self.writer is not None:
                self.writer.close()  # the reader then sees the end
            if interval and loop.time() >= sys_at:
                sys_at = loop.time() + interval
                link.publish_sys()
            wait = 1.0 if not due else min(max(0, ticks_diff(due, ms())) / 1000, 1.0)
            self.woken.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.woken.wait(), wait)

    async def connecting(self) -> None:
        """Connect when the core says, read until the stream ends, again."""
        core = self.core
        while True:
            address = core.next_address(ms())
            if address is None:
                await asyncio.sleep(0.05 if core.close_wanted is not None else 0.2)
                continue
            await self.session(address)

    async def session(self, address: str) -> None:
        core = self.core
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, int(port), ssl=self.context, server_hostname=host if self.context else None
                ),
                self.settings.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as e:
            core.up_failed(_why(e), ms())
            self.woken.set()
            return
        self.writer = writer
        core.up_open(ms())
        self.woken.set()
        why = "closed by the upstream"
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                core.up.data_received(data, ms())
                self.woken.set()
        except (OSError, ssl.SSLError) as e:
            why = _why(e)
        finally:
            self.writer = None
            writer.close()
        if core.close_wanted is not None:
            why = core.close_wanted
        core.up_failed(why, ms())
        self.woken.set()

    async def stop(self) -> None:
        """At shutdown: a DISCONNECT upstream, the tasks ended (the driver closes the local connection)."""
        self.link.stopping = True
        if self.writer is not None:
            self.core.up.disconnect()
            out = self.core.up.take_output()
            if out:
                self.writer.write(out)
            self.writer.close()
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _why(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def start_bridges(server: BrokerServer, bridges: list[Any]) -> list[BridgeRunner]:
    runners = [BridgeRunner(server, b) for b in bridges]
    for r in runners:
        r.start()
        s = r.settings
        log.info(
            "bridge %s: to %s (%s, MQTT %s, %d rule(s))",
            s.name,
            ", ".join(s.addresses),
            s.profile,
            "5" if s.protocol == 5 else "3.1.1",
            len(s.topics),
        )
    return runners
