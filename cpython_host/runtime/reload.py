"""SIGHUP: what the host reloads while it serves, and the log levels.

Every TLS listener's files into a new SSLContext (listeners.py), the HTTP
listener's certificate, the [security] users and rules (reload_security),
which apply to connected clients at once, the JWT keys and the HTTP auth
hook ([security.jwt], [security.http]), and the [log] level; one line then
says what was reloaded (reload_all). Under systemd (Type=notify) the shell
reports RELOADING=1 around it (serve.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from common.driver import Driver
from cpython_host.config import HostConfig
from cpython_host.transports.listeners import reload_certificates

if TYPE_CHECKING:
    from cpython_host.server import BrokerServer

log = logging.getLogger("siskin.host")
core_log = logging.getLogger("siskin.core")


def core_logger(level: int, text: str) -> None:
    """The core's log lines (Broker.set_logger), to the siskin.core logger."""
    # As the core made it (escaped and bounded by its own boundary): no
    # arguments, so the host's filter does not escape its escapes again.
    core_log.log(level, text)


def reload_security(config: HostConfig, driver: Driver) -> HostConfig | None:
    """SIGHUP: read the config file's [security] and its files again and
    apply them (connected clients are re-checked, common/broker/login.py); a
    file that cannot be used is logged and the rules in force are kept (None)."""
    from common.startup import describe
    from cpython_host.auth.http_hook import HttpAuth, reload_hook
    from cpython_host.auth.jwt_keys import install, load_jwt
    from cpython_host.config import ConfigError, load_config, load_security

    try:
        fresh = load_config(str(config.path), config.reader) if config.path is not None else config
        security = load_security(fresh)
        jwt = load_jwt(fresh)  # (its keys read again: a rotated key)
        if "http" in fresh.security:
            HttpAuth(driver, fresh.security["http"])  # (a url it cannot use: nothing changes)
    except (ConfigError, ValueError) as e:
        log.error("SIGHUP: %s; keeping the users and rules in force", e)
        return None
    config.security = fresh.security
    install(driver.broker, jwt)
    hook = reload_hook(driver, fresh.security.get("http"))  # ([security.http], before the rules are re-checked)
    driver.set_security(*security)
    log.info("SIGHUP: security reloaded: %s%s", describe(driver.broker), f"; {hook}" if hook else "")
    return fresh


def set_log_level(level: str, driver: Driver | None = None) -> None:
    """The level of the host's log and, given the driver, of the core's (which caches it)."""
    logging.getLogger().setLevel(getattr(logging, level.upper()))
    if driver is not None:
        driver.broker.set_logger(core_logger, core_log.getEffectiveLevel())


def reload_all(config: HostConfig, server: BrokerServer, web: Any) -> None:
    """SIGHUP: certificates (MQTT and HTTP listeners), [security] (users,
    ACL, anonymous access), [log] level and [[bridge]] tables, then one line
    saying what was reloaded. A --log-level flag keeps beating the file's level, as at start."""
    parts = []
    certificates = reload_certificates(server.listening)
    if certificates:
        parts.append(f"certificates of {certificates} TLS listener(s)")
    if web is not None and web.reload_certificate():
        parts.append("the HTTP listener's certificate")
    fresh = reload_security(config, server.driver)
    if fresh is not None:
        parts.append("users, ACL and anonymous access ([security])")
        level = config.log_level_flag or fresh.log_level
        if level != config.log_level:
            parts.append(f"log level {config.log_level} -> {level}")
            config.log_level = level
            set_log_level(level, server.driver)
            server.log_level_changed()
        else:
            parts.append(f"log level {level} (unchanged{', set by --log-level' if config.log_level_flag else ''})")
        bridges = server.bridges.reload(fresh.bridges)
        if bridges:
            parts.append(bridges)
    log.info("SIGHUP: reloaded %s", "; ".join(parts) if parts else "nothing (see the errors above)")
