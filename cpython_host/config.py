"""Configuration for the CPython host: a TOML file plus command-line flags.

A config file has three tables, all optional:

    [limits]   the broker's settings, named exactly as in common/settings.py
               (boards/linux.toml lists every one with what it does)
    [server]   listener options: host, port, backlog, write buffer marks,
               close linger and shutdown timeout
    [log]      level = "debug" | "info" | "warning" | "error"

Precedence: a command-line flag beats the file, the file beats the default.
Every mistake (missing file, TOML syntax, unknown table or key, wrong type,
out-of-range value) raises ConfigError with a one-line message that names the
file, the key and what to do; the CLI prints it and exits with code 2.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.settings import FIELDS, Settings

LOG_LEVELS = ("debug", "info", "warning", "error")

# [server] keys: (default, type, help). Times are seconds, sizes bytes.
SERVER_KEYS: dict[str, tuple[Any, type, str]] = {
    "host": ("127.0.0.1", str, "address to listen on"),
    "port": (1883, int, "TCP port (0 = any free port, logged at start)"),
    "backlog": (1024, int, "listen() backlog"),
    "write_buffer_high": (65536, int, "bytes buffered for a client before its output is paused"),
    "write_buffer_low": (16384, int, "bytes at which a paused client's output resumes"),
    "close_linger": (2.0, float, "s to drain a closing connection after the half-close"),
    "shutdown_timeout": (5.0, float, "s to wait for connections to close at shutdown"),
}

_KINDS = {name: kind for name, _default, kind in FIELDS}
_KIND_WORDS = {"int": "an integer >= 0", "bool": "true or false", "str": "a string", "list": "a list"}


class ConfigError(Exception):
    """A configuration mistake; str() is the one-line message for the user."""


@dataclass
class HostConfig:
    source: str = "built-in defaults"  # where the settings came from, for the log
    limits: dict[str, Any] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)
    host: str = "127.0.0.1"
    port: int = 1883
    backlog: int = 1024
    write_buffer_high: int = 65536
    write_buffer_low: int = 16384
    close_linger: float = 2.0
    shutdown_timeout: float = 5.0
    log_level: str = "info"


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_limit(where: str, name: str, value: Any) -> None:
    kind = _KINDS.get(name)
    if kind is None:
        raise ConfigError(
            f"{where}: unknown setting {name!r}{_suggest(name, list(_KINDS))}"
            " Fix or remove it (boards/linux.toml lists every setting)."
        )
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    elif kind == "str":
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if not ok:
            raise ConfigError(f'{where}: {name} = {value!r}: wants a list of strings, e.g. {name} = ["a/#"].')
    if not ok:
        raise ConfigError(f"{where}: {name} = {value!r}: wants {_KIND_WORDS[kind]}; fix the value.")


def _check_server(where: str, name: str, value: Any) -> Any:
    spec = SERVER_KEYS.get(name)
    if spec is None:
        raise ConfigError(
            f"{where}: unknown key {name!r}{_suggest(name, list(SERVER_KEYS))} Known keys: {', '.join(SERVER_KEYS)}."
        )
    kind = spec[1]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(f"{where}: {name} = {value!r}: wants {'a number' if kind is float else kind.__name__}.")
    number = value if isinstance(value, (int, float)) else 0
    if number < 0:
        raise ConfigError(f"{where}: {name} = {value!r}: must not be negative.")
    if name == "port" and number > 65535:
        raise ConfigError(f"{where}: port = {value}: wants 0..65535.")
    return value


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
        if table not in ("limits", "server", "log"):
            raise ConfigError(
                f"{path}: unknown table [{table}]{_suggest(table, ['limits', 'server', 'log'])}"
                " Use [limits], [server] and [log]."
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: {table} must be a table ([{table}]), not a value.")
    for name, value in doc.get("limits", {}).items():
        _check_limit(f"{path}: [limits]", name, value)
    cfg.limits = dict(doc.get("limits", {}))
    try:
        cfg.settings = Settings(cfg.limits)
    except ValueError as e:  # cross-field and range checks of the core
        raise ConfigError(f"{path}: [limits]: {e}; fix the value.") from None
    for name, value in doc.get("server", {}).items():
        setattr(cfg, name, _check_server(f"{path}: [server]", name, value))
    if cfg.write_buffer_low > cfg.write_buffer_high:
        raise ConfigError(f"{path}: [server]: write_buffer_low must not exceed write_buffer_high.")
    for name, value in doc.get("log", {}).items():
        if name != "level":
            raise ConfigError(f"{path}: [log]: unknown key {name!r}; the only key is level.")
        if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
            raise ConfigError(f"{path}: [log] level = {value!r}: wants one of {', '.join(LOG_LEVELS)}.")
        cfg.log_level = value.lower()
    return cfg
