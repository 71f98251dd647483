"""Running the host broker: the core wired to the host's clock, logs and
store, the server started with its listeners, the start-up log lines, the
signals (SIGINT/SIGTERM stop it, SIGHUP reloads: reload.py) and systemd's
notifications (Type=notify: READY=1 once every listener accepts, RELOADING=1
around a SIGHUP, STOPPING=1 at shutdown; cpython_host/operations/sdnotify.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import time
from typing import Any

from common import VERSION, startup
from common.broker.broker import Broker
from common.driver import Driver
from common.store.store import Store
from common.store.storeboot import new_broker
from cpython_host.config import HostConfig
from cpython_host.operations import sdnotify
from cpython_host.runtime.reload import core_log, core_logger, reload_all
from cpython_host.server import BrokerServer, ticks_ms
from cpython_host.transports.listeners import Listening, close_listeners

log = logging.getLogger("siskin.host")

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


def log_security(broker: Broker, listening: list[Listening]) -> None:
    """The start-up lines: users, ACL, and the anonymous decision with why (common/startup.py)."""
    hint = "[security] password_file, or allow_anonymous = true to let anyone in"
    for level, text in startup.security_lines(broker, [(lst.name, lst.local, lst.config.key) for lst in listening], hint):
        log.log(level, "%s", text)


def log_listener_rates(listening: list[Listening]) -> None:
    """The start-up line of each listener with rate limits of its own (docs/limits.md "Rate limits per listener")."""
    for lst in listening:
        rates = lst.config.rates
        if rates:
            own = ", ".join(f"{name} {value or 'off'}" for name, value in rates.items())
            log.info("%s: rate limits of its own: %s; the rest as [limits]", lst.name, own)


def host_clock(config: HostConfig) -> tuple[Any, ...]:
    """What common/startup.py's assemble and new_driver take of the host after
    the broker: its ms clock, [server] close_linger and shutdown_timeout, the
    $SYS heap figure (RSS) and the core's log."""
    return ticks_ms, (config.close_linger, config.shutdown_timeout), rss_bytes, (core_logger, core_log.getEffectiveLevel())


def make_driver(config: HostConfig, broker: Broker) -> Driver:
    """The driver around `broker`, with the host's clock and [server] settings."""
    driver: Driver = startup.new_driver(broker, *host_clock(config))
    return driver


def make_broker(config: HostConfig, store: Store | None = None) -> Broker:
    """The core, sized from the settings; ValueError for settings it refuses.

    With a `store` (common/store/storeboot.py), call driver.restore() before serving.
    """
    broker: Broker = new_broker(config.settings, os.urandom, store)
    return broker


def wall_ms() -> int:
    """The wall clock in ms since 1970 UTC (a Sparkplug timestamp)."""
    return time.time_ns() // 1_000_000


async def serve(
    config: HostConfig,
    driver: Driver,
    data_dir: str | None,
    contexts: dict[int, ssl.SSLContext],
    security: tuple[Any, ...] | None = None,
) -> int:
    """Run the broker until SIGINT/SIGTERM (SIGHUP reloads certificates and
    the [security] users and rules); the process exit code. `security`:
    the users, ACL and anonymous switch, for PyPy's socket warm-up
    (warmup.py; [server] warm_up)."""
    if security is not None and config.warm_up:
        from cpython_host.runtime.storage import give_back_heap
        from cpython_host.runtime.warmup import warm_up_sockets

        warmed = await warm_up_sockets(config, lambda b: make_driver(config, b), security)
        if warmed is not None:
            give_back_heap()
            log.info(
                "JIT warmed up: %d takeovers through a loopback epoll hub in %.2f s, "
                "%d PUBACKs beside clients over their rate limits ([server] warm_up)",
                *warmed,
            )
    server = BrokerServer(driver, config, contexts)
    loop = asyncio.get_running_loop()
    web = None
    if config.http is not None:
        from cpython_host.config import ConfigError
        from cpython_host.operations.http_server import WebServer
        from cpython_host.operations.status import listener_lines, tls_files

        try:
            web = WebServer(
                config.http,
                driver,
                server.schedule_flush,
                data_dir,
                lambda: server.bridges,
                lambda: tls_files(server),
                lambda: listener_lines(server),
            )
        except ConfigError as e:  # its certificate or key
            log.error("config error: %s", e)
            return 2
    try:
        await server.start()
        if web is not None:
            await web.start()
    except OSError as e:
        close_listeners(server.listening)
        log.error("cannot listen on %s: %s", e.filename, e.strerror or e)
        return 1
    stop_reason: list[str] = []

    def on_signal(name: str) -> None:
        if not stop_reason:
            stop_reason.append(name)
            server.request_stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)

    def on_hangup() -> None:
        sdnotify.reloading()
        reload_all(config, server, web)
        sdnotify.notify("READY=1", "STATUS=reloaded")

    loop.add_signal_handler(signal.SIGHUP, on_hangup)
    loop_name = type(loop).__module__.split(".")[0]
    first = server.listening[0]
    log.info(
        "siskin %s listening on %s (MQTT 3.1.1 + 5.0; settings: %s; event loop: %s): %s",
        VERSION,
        first.name,
        config.source,
        loop_name,
        first.describe(),
    )
    for listening in server.listening[1:]:
        log.info("also listening on %s: %s", listening.name, listening.describe())
    if data_dir is not None:
        log.info("persistent state in %s (store_sync = %s)", data_dir, driver.broker.settings.store_sync)
    log_security(driver.broker, server.listening)
    log_listener_rates(server.listening)
    # systemd (Type=notify): started once every listener accepts.
    sdnotify.notify("READY=1", f"STATUS=listening on {', '.join(lst.name for lst in server.listening)}")
    await server.stopping.wait()
    sdnotify.notify("STOPPING=1")
    if web is not None:
        await web.close()
    await server.shutdown(stop_reason[0])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.remove_signal_handler(sig)
    return 0
