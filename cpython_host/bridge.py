"""The host's runtime for the bridges (common/bridge/runner.py runs them).

What the Runner needs of a shell, on asyncio: the clock, a TCP/TLS
connection as an asyncio Protocol (its events go straight to the runner),
a sleep that a wake-up cuts short, and the driver's flush. One task per
bridge runs Runner.run(); should that task ever end other than by stop()
(the runner contains every Exception, so only something stranger could end
it), its done-callback logs it and starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from typing import Any, Protocol

from common.bridge.runner import Runner, retire_session
from common.compat import TICKS_MASK, ticks_diff
from common.driver import Driver


class BridgeHost(Protocol):
    """What the bridges ask of the server that runs them (server.py's BrokerServer)."""

    driver: Driver

    def schedule_flush(self) -> None: ...
    def note_closed(self) -> None: ...

log = logging.getLogger("siskin.bridge")


def _log(level: int, text: str) -> None:
    log.log(level, "%s", text)


def client_context(b: Any) -> ssl.SSLContext | None:
    """The SSLContext for the upstream (None: plain TCP). `b`: a BridgeSettings."""
    if not (b.tls or b.cafile):
        return None
    ctx = ssl.create_default_context(cafile=b.cafile or None)
    if b.certfile:
        ctx.load_cert_chain(b.certfile, b.keyfile)
    if b.alpn:
        ctx.set_alpn_protocols(b.alpn)
    return ctx


def ms() -> int:
    return int(time.monotonic() * 1000) & int(TICKS_MASK)


def _why(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


class Upstream(asyncio.Protocol):
    """One connection to the upstream: its events go to the runner."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.transport: Any = None  # an asyncio.Transport (uvloop's is not a subclass)
        self.task: asyncio.Task[None] | None = None  # the connect under way
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if self.closed:
            self.transport.abort()
        else:
            self.runner.up_opened(self)

    def data_received(self, data: bytes) -> None:
        self.runner.up_received(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.runner.up_ended(self, _why(exc) if exc is not None else "closed by the upstream")

    def write(self, data: bytes) -> str | None:
        t = self.transport
        if t is None:
            return "not connected"
        if t.is_closing():
            return None  # (connection_lost follows, with the reason)
        try:
            t.write(data)
        except (OSError, RuntimeError) as e:  # uvloop: RuntimeError on a transport it has closed
            return "writing failed: " + _why(e)
        return None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()  # (after what is buffered: a DISCONNECT)
        elif self.task is not None:
            self.task.cancel()


class HostRuntime:
    """What common/bridge/runner.py asks of the shell, on asyncio."""

    def __init__(self, server: BridgeHost, settings: Any) -> None:
        self.server = server
        self.settings = settings
        self.context = client_context(settings)
        self.woken = asyncio.Event()

    def now(self) -> int:
        return ms()

    def wall(self) -> int:
        return int(time.time())

    def wake(self) -> None:
        self.woken.set()

    def flush(self) -> None:
        self.server.schedule_flush()
        self.server.note_closed()  # (at shutdown: the bridge's may have been the last connection)

    async def sleep_until(self, due: int) -> None:
        woken = self.woken
        if woken.is_set():  # woken while it stepped: step again (after the others' turn)
            woken.clear()
            await asyncio.sleep(0)
            return
        wait = 1.0 if not due else min(max(0, ticks_diff(due, ms())) / 1000, 1.0)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(woken.wait(), wait)
        woken.clear()

    def open(self, address: str, runner: Runner) -> Upstream:
        conn = Upstream(runner)
        conn.task = asyncio.get_running_loop().create_task(self._connect(conn, address))
        return conn

    async def _connect(self, conn: Upstream, address: str) -> None:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        ctx = self.context
        try:
            await asyncio.get_running_loop().create_connection(
                lambda: conn, host, int(port), ssl=ctx, server_hostname=host if ctx else None
            )
        except asyncio.CancelledError:
            return  # given up (the runner's connect timeout, or stop)
        except Exception as e:  # DNS, refused, TLS, a bad name: every way an attempt fails
            conn.runner.up_ended(conn, _why(e))
        finally:
            conn.task = None


class Bridges:
    """The running bridges of a host broker: started from the config, changed
    at run time (`siskin ctl bridge ...` through web.py, SIGHUP's reload)."""

    def __init__(self, server: BridgeHost) -> None:
        self.server = server
        self.runners: list[Runner] = []

    def __iter__(self) -> Any:
        return iter(list(self.runners))

    def __len__(self) -> int:
        return len(self.runners)

    def start(self, bridges: list[Any]) -> None:
        """At start: the configured bridges (the sessions of removed ones ended
        with the restore: common/startup.py)."""
        for b in bridges:
            self.add(b)

    def find(self, name: str) -> Runner | None:
        for r in self.runners:
            if r.name == name:
                return r
        return None

    def add(self, settings: Any) -> Runner:
        """Start a bridge; ValueError if one has that name."""
        if self.find(settings.name) is not None:
            raise ValueError(f"a bridge named {settings.name!r} runs already")
        runner = Runner(settings, self.server.driver, HostRuntime(self.server, settings), _log, os.urandom)
        _start_task(runner)
        self.runners.append(runner)
        s = settings
        log.info(
            "bridge %s: to %s (%s, MQTT %s, %d rule(s))",
            s.name,
            ", ".join(s.addresses),
            s.profile,
            "5" if s.protocol == 5 else "3.1.1",
            len(s.topics),
        )
        return runner

    def remove(self, name: str) -> int:
        """Stop and remove a bridge: its session ends, its queue dead-lettered;
        the count. KeyError if there is none."""
        runner = self.find(name)
        if runner is None:
            raise KeyError(name)
        self.runners.remove(runner)
        self.server.driver.clock()
        n: int = runner.retire()
        _cancel(runner)
        return n

    def replace(self, settings: Any) -> Runner:
        """A bridge whose settings changed: the new one takes over its local
        session (and queue: nothing queued is lost) and its counters."""
        old = self.find(settings.name)
        assert old is not None
        self.runners.remove(old)
        old.restart_with()
        _cancel(old)
        if (old.settings.local_client_id or "") != (settings.local_client_id or ""):
            # A new local session: the old one's queue would wait for no one.
            self.server.driver.clock()
            retire_session(
                self.server.driver.broker, old.bridge.local.client_id, self.server.driver.now, _log, old.name
            )
        runner = self.add(settings)
        for key in ("sent", "received", "dead_lettered", "dropped", "faults", "restarts"):
            setattr(runner.bridge, key, getattr(old.bridge, key))
        return runner

    def reload(self, bridges: list[Any]) -> str:
        """SIGHUP: the config file's [[bridge]] tables; what changed, in words."""
        wanted = {b.name: b for b in bridges}
        added: list[str] = []
        changed: list[str] = []
        removed: list[str] = []
        dead = 0
        for runner in list(self.runners):
            if runner.name not in wanted:
                dead += self.remove(runner.name)
                removed.append(runner.name)
        for name in sorted(wanted):
            b = wanted[name]
            found = self.find(name)
            if found is None:
                self.add(b)
                added.append(name)
            elif not found.settings.same_as(b):
                self.replace(b)
                changed.append(name)
            else:
                found.resubscribe()  # (under the new ACL: what it refused, asked again)
        if not (added or changed or removed):
            return ""
        parts = [f"{what} {', '.join(names)}" for what, names in (("added", added), ("changed", changed),
                                                                  ("removed", removed)) if names]  # fmt: skip
        if removed:
            parts.append(f"{dead} queued message(s) of the removed dead-lettered")
        return "bridges: " + "; ".join(parts)

    async def stop(self) -> None:
        """At shutdown: DISCONNECT upstream, the tasks ended (the driver closes the local connections)."""
        for runner in list(self.runners):
            runner.stop()
            task = runner.task
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _start_task(runner: Runner) -> None:
    task = asyncio.get_running_loop().create_task(runner.run())
    runner.task = task
    task.add_done_callback(lambda t: _task_ended(runner, t))


def _cancel(runner: Runner) -> None:
    if runner.task is not None:
        runner.task.cancel()


def _task_ended(runner: Runner, task: asyncio.Task[None]) -> None:
    if runner.stopping:
        return
    why = "cancelled" if task.cancelled() else repr(task.exception())
    log.error("bridge %s: its task ended (%s); started again", runner.name, why)
    runner.restart("its task ended: " + why)
    _start_task(runner)
