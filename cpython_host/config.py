"""Configuration for the CPython host: a TOML file plus command-line flags.

A config file has three tables, all optional:

    [limits]   the broker's settings, named exactly as in common/broker/settings.py
               (boards/linux.toml lists every one with what it does)
    [server]   listener options (SERVER below): host, port, backlog, write
               buffer marks, close linger and shutdown timeout
    [log]      level = "debug" | "info" | "warning" | "error"

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
    K_CHOICE,
    K_INT,
    K_NUMBER,
    K_STR,
    LOG_LEVEL_NAMES,
    ConfigError,
    Settings,
    check,
    defaults,
)
from common.broker.settings_hint import did_you_mean

__all__ = ["SERVER", "ConfigError", "HostConfig", "load_config"]

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
TABLES = ("limits", "server", "log")


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
    for table, body in doc.items():
        if table not in TABLES:
            raise ConfigError(
                f"{path}: unknown table [{table}]{did_you_mean(table, TABLES)} Use [limits], [server] and [log]."
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
    return cfg
