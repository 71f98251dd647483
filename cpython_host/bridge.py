"""The host side of a bridge (common/bridge/bridge.py): sockets and time.

Theory of operation
-------------------
The core Bridge is two sans-I/O clients. This module gives them I/O:
- `local`: an in-memory connection of the broker, made through the same
  Driver as a socket (driver.connection_made with a `LocalHandle`); what the
  driver writes to it goes into the bridge's local client, what that client
  writes goes into driver.data_received on the next loop turn (never
  inside the driver's flush, which is what called us).
- `up`: an asyncio stream (TCP, TLS when configured) to each address in
  turn, opened when the core says (`next_address`), read in one task that
  also runs the core's timers (keep-alive, connect timeout, back-off).
$SYS/broker/bridge/<name>/... is published at every state change and every
sys_interval.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from typing import TYPE_CHECKING, Any

from common.bridge.settings import make_bridge
from common.compat import TICKS_MASK, ticks_diff

if TYPE_CHECKING:
    from cpython_host.server import BrokerServer

log = logging.getLogger("siskin.bridge")

READ_SIZE = 65536


def _log(level: int, text: str) -> None:
    log.log(level, "%s", text)


def client_context(b: Any) -> ssl.SSLContext | None:
    """The SSLContext for the upstream (None: plain TCP)."""
    if not (b.tls or b.cafile):
        return None
    ctx = ssl.create_default_context(cafile=b.cafile or None)
    if b.certfile:
        ctx.load_cert_chain(b.certfile, b.keyfile)
    return ctx


class LocalHandle:
    """The driver's handle for the bridge's in-memory connection."""

    def __init__(self, link: BridgeLink) -> None:
        self.link = link

    def write(self, data: bytes) -> None:
        self.link.from_broker(data)

    def half_close(self) -> None:
        self.link.local_ended()

    def close(self) -> None:
        self.link.local_ended()

    def abort(self) -> None:
        self.link.local_ended()

    def pending(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.link.held = True

    def resume_reading(self) -> None:
        self.link.held = False
        self.link.schedule_pump()


class BridgeLink:
    def __init__(self, server: BrokerServer, settings: Any) -> None:
        self.server = server
        self.settings = settings
        self.core = make_bridge(settings, _log, os.urandom)
        self.context = client_context(settings)
        self.handle = LocalHandle(self)
        self.cid = -1
        self.local_paused_until = 0.0
        self.held = False
        self.pump_scheduled = False
        self.stopping = False
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        self.sys_at = 0.0

    @staticmethod
    def ms() -> int:
        from cpython_host.server import ticks_ms

        return int(ticks_ms() & TICKS_MASK)

    # ---------------------------------------------------------------- local

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())
        self.pump()  # the local session is opened once at start (created, subscribed)

    def open_local(self) -> None:
        driver = self.server.driver
        name = self.settings.name
        # Its user is "bridge:<name>", proved like a TLS identity (no password).
        cid = driver.connection_made(self.handle, ("bridge " + name, "bridge:" + name, True))
        if cid < 0:
            log.error("bridge %s: the broker refused its local connection (max_connections); again in 1 s", name)
            self.pause_local(1.0)
            return
        self.cid = cid
        self.core.local_open(self.ms())

    def pause_local(self, seconds: float) -> None:
        """No local connection for `seconds` (then a pump opens it if wanted)."""
        loop = asyncio.get_running_loop()
        self.local_paused_until = loop.time() + seconds
        loop.call_later(seconds, self.schedule_pump)

    def from_broker(self, data: bytes) -> None:
        # Called inside the driver's flush: the answers go in on the next turn.
        self.core.local.data_received(data, self.ms())
        self.schedule_pump()

    def local_ended(self) -> None:
        if self.cid < 0:
            return
        cid = self.cid
        self.cid = -1
        if self.core.local_lost is not None:
            # The broker ended it (a client took the session's client id
            # over, ...): not at once again, or two could take turns.
            self.pause_local(1.0)
        self.core.local_closed()
        asyncio.get_running_loop().call_soon(self._local_gone, cid)

    def _local_gone(self, cid: int) -> None:
        server = self.server
        server.driver.connection_lost(cid)
        if not server.driver.open:
            server.all_closed.set()
        self.schedule_pump()

    def schedule_pump(self) -> None:
        if not self.pump_scheduled:
            self.pump_scheduled = True
            asyncio.get_running_loop().call_soon(self.pump)

    def pump(self) -> None:
        """Move the clients' output: to the broker, to the upstream."""
        self.pump_scheduled = False
        core = self.core
        server = self.server
        if (
            core.sync_local()
            and self.cid < 0
            and not self.stopping
            and asyncio.get_running_loop().time() >= self.local_paused_until
        ):
            self.open_local()
        if self.cid >= 0 and not self.held:
            out = core.local.take_output()
            if out:
                server.driver.data_received(self.cid, out)
                server.schedule_flush()
        up = core.up.take_output()
        if up and self.writer is not None:
            self.writer.write(up)
        if core.local_lost is not None and self.cid >= 0:
            self.handle.close()  # the local client gave up on this connection
        if core.state_changed or core.close_wanted is not None:
            self.wake.set()
        if core.state_changed:
            core.state_changed = False
            self.publish_sys()

    # ----------------------------------------------------------------- $SYS

    def publish_sys(self) -> None:
        server = self.server
        broker = server.broker
        core = self.core
        session = broker.sessions.find(core.local.client_id)
        queued = queued_bytes = 0
        if session is not None and session.queue is not None:
            queued = session.queue.count
            queued_bytes = session.queued_bytes
        now = server.driver.now
        for topic, text in core.sys_values(queued, queued_bytes):
            broker.publish(topic, text.encode(), 0, True, now)
        server.schedule_flush()

    # ------------------------------------------------------------- upstream

    async def run(self) -> None:
        core = self.core
        interval = self.server.broker.settings.sys_interval
        loop = asyncio.get_running_loop()
        while not self.stopping:
            ms = self.ms()
            address = core.next_address(ms)
            if address is not None:
                await self.session(address)
                continue
            due = core.tick(ms)
            self.pump()
            if interval and loop.time() >= self.sys_at:
                self.sys_at = loop.time() + interval
                self.publish_sys()
            wait = 1.0 if not due else max(0, ticks_diff(due, self.ms())) / 1000
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), min(wait, 1.0))
            except TimeoutError:
                pass

    async def session(self, address: str) -> None:
        """One connection to `address`, from the attempt to its end."""
        core = self.core
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        timeout = self.settings.connect_timeout
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, int(port), ssl=self.context, server_hostname=host if self.context else None
                ),
                timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            core.up_failed(_why(e), self.ms())
            self.pump()
            return
        self.writer = writer
        core.up_open(self.ms())
        self.pump()
        why = "closed by the upstream"
        interval = self.server.broker.settings.sys_interval
        loop = asyncio.get_running_loop()
        try:
            while not self.stopping:
                due = core.tick(self.ms())
                self.pump()
                if core.close_wanted is not None:
                    why = core.close_wanted
                    break
                if interval and loop.time() >= self.sys_at:
                    self.sys_at = loop.time() + interval
                    self.publish_sys()
                wait = 1.0 if not due else max(0, ticks_diff(due, self.ms())) / 1000
                try:
                    data = await asyncio.wait_for(reader.read(READ_SIZE), min(wait, 1.0))
                except TimeoutError:
                    continue
                if not data:
                    break
                core.up.data_received(data, self.ms())
                self.pump()
        except (OSError, ssl.SSLError) as e:
            why = _why(e)
        finally:
            self.writer = None
            writer.close()
        if self.stopping:
            return
        core.up_failed(why, self.ms())
        self.pump()

    async def stop(self) -> None:
        """At shutdown: a DISCONNECT upstream, the task ended."""
        self.stopping = True
        core = self.core
        if self.writer is not None:
            core.up.disconnect()
            out = core.up.take_output()
            if out:
                self.writer.write(out)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass


def _why(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return "timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def start_bridges(server: BrokerServer, bridges: list[Any]) -> list[BridgeLink]:
    links = [BridgeLink(server, b) for b in bridges]
    for link in links:
        link.start()
        log.info(
            "bridge %s: to %s (%s, MQTT %s, %d rule(s))",
            link.settings.name,
            ", ".join(link.settings.addresses),
            link.settings.profile,
            "5" if link.settings.protocol == 5 else "3.1.1",
            len(link.settings.topics),
        )
    return links
