"""Configuration for the CPython host: a TOML file plus command-line flags.

A config file has three tables, all optional:

    [limits]   the broker's settings, named exactly as in common/broker/settings.py
               (boards/linux.toml lists every one with what it does)
    [server]   listener options (SERVER below): host, port, backlog, write
               buffer marks, close linger and shutdown timeout
    [log]      level = "debug" | "info" | "warning" | "error"
    [security] users, access control, anonymous access (SECURITY below;
               docs/security.md): password_file, acl_file, acl, allow_anonymous

Precedence: a command-line flag beats the file, the file beats the default.
Every mistake (missing file, TOML syntax, unknown table or key, wrong type,
out-of-range value) raises ConfigError with a one-line message that names the
file, the key and what to do; the CLI prints it and exits with code 2. The
keys are checked by the core's one validator (common/broker/settings.py), the same
one the board's JSON goes through; this module only reads TOML.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from common.broker.settings import (
    K_BOOL,
    K_CHOICE,
    K_INT,
    K_LIST,
    K_NUMBER,
    K_STR,
    LOG_LEVEL_NAMES,
    ConfigError,
    Settings,
    check,
    defaults,
)
from common.broker.settings_hint import did_you_mean

__all__ = ["SECURITY", "SERVER", "ConfigError", "HostConfig", "load_config", "load_security"]

# [server]: the schema of common/broker/settings.py. Times are seconds, sizes bytes.
SERVER = (
    ("host", "127.0.0.1", K_STR, None, None),  # address to listen on
    ("port", 1883, K_INT, 0, 65535),  # TCP port (0 = any free port, logged at start)
    ("backlog", 1024, K_INT, 0, None),  # listen() backlog
    ("write_buffer_high", 65536, K_INT, 0, None),  # bytes buffered for a client before its output is paused
    ("write_buffer_low", 16384, K_INT, 0, None),  # bytes at which a paused client's output resumes
    ("close_linger", 2.0, K_NUMBER, 0, None),  # s to drain a closing connection after the half-close
    ("shutdown_timeout", 5.0, K_NUMBER, 0, None),  # s to wait for connections to close at shutdown
)
# [log]
LOG = (("level", "info", K_CHOICE, LOG_LEVEL_NAMES, None),)  # how much to log (case does not matter)
# [security] (docs/security.md). A key left out is "not set": no password
# file, no ACL, and allow_anonymous decided by the listener (loopback only).
SECURITY = (
    ("password_file", None, K_STR, None, None),  # users: mosquitto_passwd or `siskin passwd` lines
    ("acl_file", None, K_STR, None, None),  # Mosquitto acl_file rules; deny by default once set
    ("acl", None, K_LIST, None, None),  # the same rules as tables: {user, topic | pattern, access}
    ("allow_anonymous", None, K_BOOL, None, None),  # clients without a user name; not set: loopback only
)
TABLES = ("limits", "server", "log", "security")


class HostConfig:
    """The host's whole configuration: the broker's Settings plus SERVER and the log level."""

    host: str
    port: int
    backlog: int
    write_buffer_high: int
    write_buffer_low: int
    close_linger: float
    shutdown_timeout: float

    def __init__(self) -> None:
        self.source = "built-in defaults"  # where the settings came from, for the log
        self.path: Path | None = None  # the config file (re-read on SIGHUP)
        self.security: dict[str, Any] = {}  # [security] as written (keys not set are absent)
        self.limits: dict[str, Any] = {}
        self.settings = Settings()
        self.log_level = "info"
        self.apply(defaults(SERVER))

    def apply(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            setattr(self, name, value)


def load_config(path: str | None) -> HostConfig:
    """Read a TOML config file (None: the defaults); raises ConfigError."""
    cfg = HostConfig()
    if path is None:
        return cfg
    p = Path(path)
    try:
        with p.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such config file; pass an existing file to --config (e.g. boards/linux.toml)."
        ) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror}.") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}; fix the syntax.") from None
    cfg.source = str(p)
    cfg.path = p
    for table, body in doc.items():
        if table not in TABLES:
            raise ConfigError(
                f"{path}: unknown table [{table}]{did_you_mean(table, TABLES)} Use [limits], [server], [log] and [security]."
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: {table} must be a table ([{table}]), not a value.")
    cfg.limits = dict(doc.get("limits", {}))
    cfg.settings = Settings(cfg.limits, f"{path}: [limits]")
    cfg.apply(check(f"{path}: [server]", doc.get("server", {}), SERVER))
    if cfg.write_buffer_low > cfg.write_buffer_high:
        raise ConfigError(f"{path}: [server]: write_buffer_low must not exceed write_buffer_high.")
    log = {k: v.lower() if isinstance(v, str) else v for k, v in doc.get("log", {}).items()}
    cfg.log_level = check(f"{path}: [log]", log, LOG).get("level", cfg.log_level)
    security = doc.get("security", {})
    acl = security.get("acl")
    # The rules are tables: checked by Acl.from_rules, not as a list of strings.
    cfg.security = check(f"{path}: [security]", {k: v for k, v in security.items() if k != "acl"}, SECURITY)
    if acl is not None:
        if not isinstance(acl, list):
            raise ConfigError(f"{path}: [security]: acl wants a list of tables {{user, topic | pattern, access}}.")
        cfg.security["acl"] = acl
    return cfg


def load_security(cfg: HostConfig) -> tuple[Any, Any, bool | None]:
    """(Users or None, Acl or None, allow_anonymous) from [security] and the
    files it names; ConfigError "FILE:LINE: reason" for a file it cannot use.

    A relative file name is taken from the config file's directory.
    """
    from common.broker.acl import Acl
    from common.broker.users import Users

    sec = cfg.security
    base = cfg.path.parent if cfg.path is not None else Path(".")
    users = None
    acl = None
    if sec.get("password_file") is not None:
        name = base / sec["password_file"]
        users = Users.parse(_read(name, "password_file"), str(name))
    if sec.get("acl_file") is not None:
        name = base / sec["acl_file"]
        acl = Acl.parse(_read(name, "acl_file"), str(name))
    if sec.get("acl") is not None:
        acl = Acl.from_rules(sec["acl"], f"{cfg.source}: [security] acl", acl)
    return users, acl, sec.get("allow_anonymous")


def _read(path: Path, key: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {key}: {e.strerror}.") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the {key} is not UTF-8 text.") from None
