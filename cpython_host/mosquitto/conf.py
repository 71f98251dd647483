"""Read a Mosquitto configuration (mosquitto.conf) as a Siskin configuration.

`siskin convert-mosquitto-conf FILE` prints the Siskin TOML; `siskin
--mosquitto-conf FILE` runs with it directly (and re-reads FILE on SIGHUP).

Theory of operation
-------------------
mosquitto.conf is a list of `option value...` lines ('#' comments only at
the start of a line). General options set the broker; `listener PORT [ADDR]`
opens a listener, and the listener options after it (protocol, certfile,
...) belong to it; `port` / `bind_address` and the listener options before
the first `listener` line describe Mosquitto's "default listener".
`include_dir DIR` reads DIR/*.conf in sorted order at that point.

`convert` turns that into the document load_config checks: a dict of the
Siskin tables ([server], [[listener]], [limits], [security], [log],
[[bridge]]: `connection` sections, cpython_host/mosquitto_bridge.py). Every
option is one of
- converted (OPTIONS, LISTENER_OPTIONS): the Siskin key that does the same;
  where the meaning differs a little, a note says how;
- noted (NOTED): has nothing to set in Siskin, which already behaves so or
  leaves it to systemd (pid_file, log_dest, autosave...): a note says why;
- a Mosquitto 2 no-op (MOSQUITTO2_NOOPS: allow_duplicate_messages ...):
  Mosquitto 2 reads and ignores it, so does Siskin, with a note;
- unsupported (anything else, and values Siskin cannot honour):
  "FILE:LINE: 'option' is not supported: why". By default the conversion
  reads the whole file and then stops with every such line (one
  ConfigError); with ignore_unsupported it goes on and they become notes
  too. Nothing is dropped without a word.

Relative names (password_file, certfile, include_dir ...) are taken from
the Mosquitto file's own directory and written whole. With persistence,
Siskin's store goes to DATA_DIR, never into Mosquitto's
persistence_location: Mosquitto's files stay as they were.

Mosquitto 2.0's defaults are not copied: what the file does not say keeps
Siskin's default (docs/limits.md), except allow_anonymous, which Mosquitto 2
turns off as soon as a listener is configured (Siskin's "not set" would
still serve anonymous clients on a loopback listener), so it is written out.
`to_toml` renders the document with the notes as comments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from common.broker.settings import ConfigError
from cpython_host.mosquitto import bridge as mosquitto_bridge
from cpython_host.mosquitto.goauth import GoAuth

_BOOL = {"true": True, "false": False}
# log_type -> how verbose Siskin's log must be to show it (the most verbose wins).
_LOG_TYPES = {
    "all": "debug",
    "debug": "debug",
    "subscribe": "debug",
    "unsubscribe": "debug",
    "websockets": "debug",
    "information": "info",
    "notice": "info",
    "warning": "warning",
    "error": "error",
    "none": "error",
}
_VERBOSITY = ("error", "warning", "info", "debug")
# Where a converted Mosquitto with persistence keeps Siskin's store (the systemd unit's data directory).
DATA_DIR = "/var/lib/siskin"
# persistent_client_expiration units, as Mosquitto counts them (m = 30 days).
_UNITS = {"h": 3600, "d": 86400, "w": 604800, "m": 2592000, "y": 31536000}

# Options Siskin has nothing to set for, and why that is the same behaviour.
NOTED = {
    "pid_file": "Siskin writes no pid file; systemd tracks the process (contrib/systemd/siskin.service)",
    "user": "Siskin does not switch users; the systemd unit runs it as the user siskin (User=siskin)",
    "log_timestamp": "Siskin's log lines always carry a time stamp (the journal adds its own)",
    "log_timestamp_format": "Siskin's log lines carry an ISO-like time stamp; the format is fixed",
    "connection_messages": "Siskin always logs connects, disconnects and refusals at level info",
    "set_tcp_nodelay": "Siskin always sets TCP_NODELAY",
    "autosave_interval": "Siskin's store writes every change as it happens ([limits] store_sync), no periodic save",
    "autosave_on_changes": "Siskin's store writes every change as it happens ([limits] store_sync), no periodic save",
    "persistence_file": "Siskin keeps its own file (DATA_DIR/siskin.log); siskin import-mosquitto-db reads Mosquitto's",
}
# Options Mosquitto 2 reads and ignores (deprecated or removed): accepted with a note.
MOSQUITTO2_NOOPS = {
    "allow_duplicate_messages": "duplicates are delivered (overlapping subscriptions), as Mosquitto 2 and MQTT 5 do",
    "retry_interval": "MQTT 3.1.1 and 5 resend only on reconnect, which Siskin does",
    "store_clean_interval": "Siskin frees a message when its last copy is sent",
}


class Conversion:
    """The result: `doc` (the tables load_config checks) and `notes` ("FILE:LINE: text")."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {}
        self.notes: list[str] = []


class _Reader:
    """One pass over the lines (and included files), filling a Conversion."""

    def __init__(self, ignore_unsupported: bool) -> None:
        self.ignore = ignore_unsupported
        self.out = Conversion()
        self.limits: dict[str, Any] = {}
        self.security: dict[str, Any] = {}
        self.server: dict[str, Any] = {}
        self.default: dict[str, Any] = {}  # the default listener (port / bind_address and options before `listener`)
        self.default_where = ""
        self.listeners: list[dict[str, Any]] = []
        self.current = self.default
        self.log_levels: list[str] = []
        self.syslog = False  # log_dest syslog: [log] syslog = "/dev/log"
        self.persistence = False
        self.location: str | None = None
        self.where = ""
        self.bridges: list[mosquitto_bridge.Bridge] = []  # `connection` sections, in order
        self.refused: list[str] = []  # "FILE:LINE: 'option' is not supported: why", in order
        self.goauth = GoAuth()  # auth_plugin and auth_opt_* lines (mosquitto-go-auth)
        self.per_listener = False  # per_listener_settings true

    # ------------------------------------------------------------ messages

    def note(self, text: str) -> None:
        self.out.notes.append(f"{self.where}: {text}")

    def unsupported(self, option: str, why: str) -> None:
        text = f"{self.where}: '{option}' is not supported: {why}"
        if not self.ignore:
            self.refused.append(text)  # (all of them said at the end: refusals())
            return
        self.out.notes.append(text + "; left out")

    def refusals(self) -> None:
        """ConfigError naming every option refused, one a line, if any."""
        if self.refused:
            more = f"\n{len(self.refused)} options are not supported" if len(self.refused) > 1 else ""
            raise ConfigError(
                "\n".join(self.refused) + more + " (--ignore-unsupported converts the rest and lists these)"
            )

    def bad(self, option: str, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: {option}: {why}")

    # -------------------------------------------------------------- values

    def one(self, option: str, args: list[str]) -> str:
        if len(args) != 1:
            raise self.bad(option, f"wants one value, got {len(args)}")
        return args[0]

    def boolean(self, option: str, args: list[str]) -> bool:
        value = self.one(option, args)
        if value not in _BOOL:
            raise self.bad(option, f"wants true or false, not {value!r}")
        return _BOOL[value]

    def integer(self, option: str, args: list[str], low: int = 0) -> int:
        value = self.one(option, args)
        try:
            n = int(value)
        except ValueError:
            raise self.bad(option, f"wants a whole number, not {value!r}") from None
        if n < low:
            raise self.bad(option, f"wants a number of at least {low}, not {n}")
        return n

    def path(self, option: str, args: list[str], base: Path) -> str:
        # Mosquitto opens a relative name from its working directory; the
        # file's own directory is the closest stable meaning (and a note says so).
        value = " ".join(args)  # a path may hold spaces: Mosquitto takes the rest of the line
        if not value:
            raise self.bad(option, "wants a file name")
        if not os.path.isabs(value):
            self.note(f"{option} {value}: a relative name, taken from {base}")
            value = str(base / value)
        return value

    # ---------------------------------------------------------------- file

    def read_file(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{path}: cannot read the Mosquitto configuration: {e.strerror}.") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: the Mosquitto configuration is not UTF-8 text.") from None
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or raw.startswith("#"):
                continue
            self.where = f"{path}:{number}"
            option, *args = line.split()
            self.option(option, args, path.parent)

    def option(self, option: str, args: list[str], base: Path) -> None:
        handler = self.HANDLERS.get(option)
        bridge_option = mosquitto_bridge.OPTIONS.get(option)
        if handler is not None:
            handler(self, option, args, base)
        elif option == "connection":
            mosquitto_bridge.connection(self, option, args, base)
        elif bridge_option is not None:
            if not self.bridges:
                raise self.bad(option, "a bridge option before the first `connection` line")
            bridge_option(self, self.bridges[-1], option, args, base)
        elif option in LISTENER_OPTIONS:
            self.listener_option(option, args, base)
        elif option in OPTIONS:
            key, convert = OPTIONS[option]
            table, name = key
            value = convert(self, option, args)
            if value is not None and table == "security" and self.per_listener:
                self.current.setdefault("security", {})[name] = value  # that listener's own ([listener.security])
            elif value is not None:
                (self.limits if table == "limits" else self.security)[name] = value
        elif option in NOTED:
            self.note(f"'{option}' has no Siskin setting: {NOTED[option]}")
        elif option in MOSQUITTO2_NOOPS:
            self.note(f"'{option}' does nothing in Mosquitto 2, nor here: {MOSQUITTO2_NOOPS[option]}")
        elif option == "auth_plugin" or option.startswith("auth_opt_"):
            self.goauth.option(self, option, args)
        else:
            self.unsupported(option, _UNSUPPORTED.get(option, _unsupported_why(option)))

    # ------------------------------------------------------------ handlers

    def h_listener(self, option: str, args: list[str], base: Path) -> None:
        if not 1 <= len(args) <= 2:
            raise self.bad(option, "wants a port and optionally an address: listener 1883 [192.0.2.1]")
        port = self.integer(option, args[:1])
        if port > 65535:
            raise self.bad(option, f"port {port} is not a TCP port")
        if len(args) == 2 and args[1].startswith("/"):
            self.unsupported("listener", "unix socket listeners; use a TCP port on 127.0.0.1")
            self.current = {}  # its options go nowhere (listed above)
            return
        if port == 0:
            self.unsupported("listener", "port 0 (Mosquitto's unix socket form)")
            self.current = {}
            return
        # No address: Mosquitto listens on every interface, IPv4 and IPv6.
        self.current = {"host": args[1] if len(args) == 2 else "", "port": port}
        self.listeners.append(self.current)

    def h_port(self, option: str, args: list[str], base: Path) -> None:
        port = self.integer(option, args)
        if port > 65535:
            raise self.bad(option, f"{port} is not a TCP port")
        self.default["port"] = port
        self.default_where = self.where

    def h_bind_address(self, option: str, args: list[str], base: Path) -> None:
        self.default["host"] = self.one(option, args)
        self.default_where = self.where

    def h_include_dir(self, option: str, args: list[str], base: Path) -> None:
        directory = Path(self.path(option, args, base))
        where = self.where
        try:
            names = sorted(p for p in directory.iterdir() if p.name.endswith(".conf") and p.is_file())
        except OSError as e:
            raise self.bad(option, f"cannot list {directory}: {e.strerror}") from None
        for name in names:
            self.read_file(name)
        self.where = where

    def h_per_listener_settings(self, option: str, args: list[str], base: Path) -> None:
        # Then password_file, acl_file and allow_anonymous belong to the
        # listener they follow: its [listener.security] (finish()).
        self.per_listener = self.boolean(option, args)
        if self.per_listener and self.security:
            raise self.bad(option, f"must come before {', '.join(sorted(self.security))} (as Mosquitto wants)")

    def h_persistence(self, option: str, args: list[str], base: Path) -> None:
        self.persistence = self.boolean(option, args)

    def h_persistence_location(self, option: str, args: list[str], base: Path) -> None:
        self.location = self.path(option, args, base)

    def h_log_type(self, option: str, args: list[str], base: Path) -> None:
        kind = self.one(option, args)
        if kind not in _LOG_TYPES:
            raise self.bad(option, f"unknown log type {kind!r}; Mosquitto's are {', '.join(sorted(_LOG_TYPES))}")
        if kind == "none":
            self.note("log_type none: Siskin always logs errors (level error)")
        self.log_levels.append(_LOG_TYPES[kind])

    def h_log_dest(self, option: str, args: list[str], base: Path) -> None:
        dest = args[0] if args else ""
        if dest == "syslog":
            self.syslog = True
        elif dest in ("stderr", "stdout", "file"):
            self.note(
                f"log_dest {' '.join(args)}: Siskin logs to stderr; under systemd that is the journal "
                "(journalctl -u siskin; StandardError=append:FILE in the unit for a file)"
            )
        else:
            self.unsupported(option, f"log_dest {dest or '(none)'}; Siskin logs to stderr (the journal under systemd)")

    def h_max_connections(self, option: str, args: list[str], base: Path) -> None:
        value = self.one(option, args)
        try:
            n = int(value)
        except ValueError:
            raise self.bad(option, f"wants a whole number, not {value!r}") from None
        # A listener option in Mosquitto; Siskin's bound is the broker's (finish() sums them).
        self.current["_max_connections"] = n if n >= 0 else None

    def h_max_qos(self, option: str, args: list[str], base: Path) -> None:
        n = self.integer(option, args)
        if n > 2:
            raise self.bad(option, f"wants 0, 1 or 2, not {n}")
        self.current["_max_qos"] = n

    HANDLERS: ClassVar[dict[str, Callable[[_Reader, str, list[str], Path], None]]] = {
        "listener": h_listener,
        "port": h_port,
        "bind_address": h_bind_address,
        "include_dir": h_include_dir,
        "per_listener_settings": h_per_listener_settings,
        "persistence": h_persistence,
        "persistence_location": h_persistence_location,
        "log_type": h_log_type,
        "log_dest": h_log_dest,
        "max_connections": h_max_connections,  # listener options kept aside: see finish()
        "max_qos": h_max_qos,
    }

    def listener_option(self, option: str, args: list[str], base: Path) -> None:
        name, convert = LISTENER_OPTIONS[option]
        value = convert(self, option, args, base)
        if value is not None:
            self.current[name] = value
            if value == "websockets":
                self.current["path"] = ""  # Mosquitto's WebSocket listeners take any URL path
            if self.current is self.default and not self.default_where:
                self.default_where = self.where

    # ---------------------------------------------------------------- end

    def finish(self) -> Conversion:
        doc = self.out.doc
        listeners = list(self.listeners)
        if "port" in self.default or "host" in self.default:
            # Mosquitto's default listener: port (1883) on bind_address (every interface).
            listeners.insert(0, {"host": "", "port": 1883, **self.default})
        elif self.default:
            self.where = self.default_where
            raise self.bad(
                ", ".join(sorted(self.default)),
                "a listener option before the first `listener` line, with no port or bind_address: "
                "move it below the `listener` it is for",
            )
        if listeners:
            doc["listener"] = listeners
            # Mosquitto 2: with a listener configured, anonymous clients are refused unless allowed.
            self.security.setdefault("allow_anonymous", False)
            if self.per_listener:
                for lst in listeners:  # (each one: a listener's own security leaves [security] aside)
                    lst.setdefault("security", {}).setdefault("allow_anonymous", False)
                self.out.notes.append(
                    "per_listener_settings true: each listener's password_file, acl_file and allow_anonymous "
                    "are its own [listener.security] table"
                )
        # Listener options in Mosquitto, one bound for the broker in Siskin.
        counts = [lst.pop("_max_connections", None) for lst in listeners]
        qos = [lst.pop("_max_qos", 2) for lst in listeners]
        if any(n is not None for n in counts):
            if all(n is not None for n in counts):
                self.limits["max_connections"] = sum(n for n in counts if n is not None)
                if len(counts) > 1:
                    self.out.notes.append(
                        "max_connections: Mosquitto counts per listener, Siskin for the broker: "
                        f"{self.limits['max_connections']}, the sum"
                    )
            else:
                self.out.notes.append(
                    "max_connections: set for some listeners only (Mosquitto counts per listener, Siskin "
                    "for the broker): the others are unlimited, so Siskin's default max_connections is kept"
                )
        if any(n != 2 for n in qos):
            self.limits["maximum_qos"] = max(qos)
            if len(set(qos)) > 1:
                self.out.notes.append(f"max_qos: Siskin has one maximum for every listener: {max(qos)}, the highest")
        if self.persistence:
            # Never Mosquitto's own directory: its files stay as they were (the way back), and
            # Siskin's store is not mixed into them.
            self.server["data_dir"] = DATA_DIR
            self.out.notes.append(
                f"persistence true{' (persistence_location ' + self.location + ')' if self.location else ''}: "
                f"Siskin keeps its store apart from Mosquitto's, in data_dir = {DATA_DIR} (the systemd "
                "unit's; --data-dir overrides it); Mosquitto's directory is left as it is"
            )
        elif self.location:
            self.out.notes.append(f"persistence_location {self.location}: persistence is off, so not used")
        if self.persistence:
            self.out.notes.append(
                "Mosquitto's persistence file (mosquitto.db: retained messages, persistent sessions, their "
                "subscriptions and queued messages) is not read by this conversion: "
                f"`siskin import-mosquitto-db {os.path.join(self.location or '.', 'mosquitto.db')} --data-dir "
                f"{DATA_DIR} --config SISKIN.TOML` brings it along (docs/install.md)"
            )
        self.goauth.finish(self)
        if self.bridges:
            doc["bridge"] = [b.finish(self) for b in self.bridges]
            if "acl_file" in self.security:
                names = ", ".join(b.table["name"] for b in self.bridges)
                self.out.notes.append(
                    f"acl_file and bridge(s) {names}: each bridge's local client (user bridge:NAME) may read its "
                    '"out" topics and write its "in" ones whatever the acl_file says; a deny rule for '
                    "bridge:NAME still wins, and its refused subscription is an error (docs/bridge.md)"
                )
        if self.server:
            doc["server"] = self.server
        if self.limits:
            doc["limits"] = self.limits
        if self.security:
            doc["security"] = self.security
        if self.log_levels:
            doc["log"] = {"level": max(self.log_levels, key=_VERBOSITY.index)}
        if self.syslog:
            doc.setdefault("log", {})["syslog"] = "/dev/log"
        return self.out


def _unsupported_why(option: str) -> str:
    if option.startswith("plugin_opt_"):
        return "Siskin loads no plugins"
    if option.startswith("bridge_"):
        return "Siskin's [[bridge]] has no such setting"
    return "Siskin has no such setting"


_UNSUPPORTED = {
    "plugin": "Siskin loads no plugins; users come from password_file, rules from acl_file",
    "psk_file": "TLS-PSK is not supported; use certificates",
    "psk_hint": "TLS-PSK is not supported; use certificates",
    "capath": "use cafile (one PEM file with the CAs)",
    "ciphers_tls1.3": "Python's ssl module cannot narrow TLS 1.3's cipher suites (OpenSSL's defaults are used)",
    "dhparamfile": "the TLS key exchange is Python's default (ECDHE)",
    "http_dir": "the HTTP listener serves Siskin's own status page only",
    "socket_domain": "a listener's address family follows its address (0.0.0.0: IPv4, :: : IPv6)",
    "allow_zero_length_clientid": "Siskin's handling of empty client ids is fixed (MQTT's rules)",
    "auto_id_prefix": "Siskin's handling of empty client ids is fixed (MQTT's rules)",
    "clientid_prefixes": "client ids are not restricted by prefix; use the ACL",
    "memory_limit": "bound memory with [limits] (max_messages, max_queued_total_bytes, max_retained_bytes)",
    "upgrade_outgoing_qos": "Siskin delivers at the lower of the two QoS, as MQTT says",
    "check_retain_source": "retained messages are not re-checked against the publisher's ACL",
    "websockets_log_level": "no WebSocket library log to tune",
    "websockets_headers_size": "no WebSocket header size to tune",
    "listener_allow_anonymous": "set allow_anonymous (with per_listener_settings true: per listener)",
    "listener_auto_id_prefix": "Siskin's handling of empty client ids is fixed (MQTT's rules)",
    "accept_protocol_versions": "Siskin accepts MQTT 3.1.1 and 5 (and 3.1 with [limits] allow_mqtt31)",
    "enable_control_api": "use siskin ctl",
}


def _int(r: _Reader, option: str, args: list[str]) -> int:
    return r.integer(option, args)


def _bool(r: _Reader, option: str, args: list[str]) -> bool:
    return r.boolean(option, args)


def _no_max(default_note: str) -> Callable[[_Reader, str, list[str]], int | None]:
    """Mosquitto's 0 = no maximum; Siskin's default is kept for it."""

    def convert(r: _Reader, option: str, args: list[str]) -> int | None:
        n = r.integer(option, args)
        if n == 0:
            r.note(f"{option} 0 (no maximum): Siskin's default is kept ({default_note})")
            return None
        return n

    return convert


def _max_inflight(r: _Reader, option: str, args: list[str]) -> int:
    n = r.integer(option, args)
    return 65535 if n == 0 else min(n, 65535)  # 0 = no maximum; MQTT's packet ids bound it anyway


def _max_keepalive(r: _Reader, option: str, args: list[str]) -> int:
    n = r.integer(option, args)
    if n > 65535:
        raise r.bad(option, f"wants 0..65535, not {n}")
    return 0 if n == 65535 else n  # Mosquitto's default, 65535, is no cap (Siskin's 0)


def _message_size_limit(r: _Reader, option: str, args: list[str]) -> int | None:
    n = r.integer(option, args)
    if n == 0:
        return None  # Mosquitto's default: every valid packet
    # Mosquitto bounds the payload, Siskin the whole packet: room for the
    # headers (fixed header 5, topic 2 + max_topic_length, packet id 2,
    # v5 properties) on top of the payload.
    room = 5 + 2 + 1024 + 2 + 256
    r.note(
        f"message_size_limit {n} (payload bytes) becomes max_packet_size {n + room} (the whole packet, "
        f"{room} bytes of room for topic and headers); a client whose PUBLISH is larger is disconnected "
        "(v5: DISCONNECT 0x95) where Mosquitto acknowledged and dropped it"
    )
    return n + room


def _persistent_client_expiration(r: _Reader, option: str, args: list[str]) -> int:
    value = r.one(option, args)
    unit = value[-1:]
    if unit not in _UNITS or not value[:-1].isdigit():
        raise r.bad(option, f"wants a number and a unit h, d, w, m or y (e.g. 14d), not {value!r}")
    return int(value[:-1]) * _UNITS[unit]


def _path_option(r: _Reader, option: str, args: list[str]) -> str:
    return r.path(option, args, Path(r.where.rsplit(":", 1)[0]).parent)


# General options: mosquitto option -> ((Siskin table, key), converter(reader, option, args)).
OPTIONS: dict[str, tuple[tuple[str, str], Callable[[_Reader, str, list[str]], Any]]] = {
    "allow_anonymous": (("security", "allow_anonymous"), _bool),
    "password_file": (("security", "password_file"), _path_option),
    "acl_file": (("security", "acl_file"), _path_option),
    "max_queued_messages": (("limits", "max_queued_messages"), _no_max("1,000,000")),
    "max_queued_bytes": (("limits", "max_queued_bytes"), _no_max("64 MiB")),
    "queue_qos0_messages": (("limits", "queue_qos0_offline"), _bool),
    "max_inflight_messages": (("limits", "max_inflight"), _max_inflight),
    "max_keepalive": (("limits", "max_keepalive"), _max_keepalive),
    "message_size_limit": (("limits", "max_packet_size"), _message_size_limit),
    "max_packet_size": (("limits", "max_packet_size"), _no_max("1 MiB")),
    "retain_available": (("limits", "retain_available"), _bool),
    "sys_interval": (("limits", "sys_interval"), _int),
    "persistent_client_expiration": (("limits", "persistent_session_expiry"), _persistent_client_expiration),
}


def _listener_path(r: _Reader, option: str, args: list[str], base: Path) -> str:
    return r.path(option, args, base)


def _listener_bool(r: _Reader, option: str, args: list[str], base: Path) -> bool:
    return r.boolean(option, args)


def _protocol(r: _Reader, option: str, args: list[str], base: Path) -> str | None:
    value = r.one(option, args)
    if value == "mqtt":
        return None  # the default
    if value != "websockets":
        raise r.bad(option, f"wants mqtt or websockets, not {value!r}")
    return "websockets"


def _tls_version(r: _Reader, option: str, args: list[str], base: Path) -> str | None:
    value = r.one(option, args)
    if value in ("tlsv1.2", "tlsv1.3"):
        return value  # the oldest accepted, in both
    r.unsupported(option, f"{value}: Siskin accepts TLS 1.2 and 1.3 only (tls_version tlsv1.2 or tlsv1.3)")
    return None


def _listener_str(r: _Reader, option: str, args: list[str], base: Path) -> str:
    return r.one(option, args)


def _use_subject_as_username(r: _Reader, option: str, args: list[str], base: Path) -> bool | None:
    if not r.boolean(option, args):
        return None
    r.current["identity"] = "subject"  # the whole subject, as Mosquitto prints it (RFC 2253: "CN=x,O=y")
    return True


# Listener options: mosquitto option -> ([[listener]] key, converter).
LISTENER_OPTIONS: dict[str, tuple[str, Callable[[_Reader, str, list[str], Path], Any]]] = {
    "protocol": ("protocol", _protocol),
    "cafile": ("cafile", _listener_path),
    "certfile": ("certfile", _listener_path),
    "keyfile": ("keyfile", _listener_path),
    "require_certificate": ("require_certificate", _listener_bool),
    "use_identity_as_username": ("use_identity_as_username", _listener_bool),
    "tls_version": ("tls_version", _tls_version),
    "mount_point": ("mount_point", _listener_str),
    "ciphers": ("ciphers", _listener_str),
    "crlfile": ("crlfile", _listener_path),
    "use_subject_as_username": ("use_identity_as_username", _use_subject_as_username),
}


def convert(path: str, ignore_unsupported: bool = False) -> Conversion:
    """The Siskin document of a mosquitto.conf; ConfigError for a file it cannot honour."""
    reader = _Reader(ignore_unsupported)
    # Absolute: a relative name in it is taken from its directory, which the
    # converted file (read elsewhere, by a process started elsewhere) must name whole.
    reader.read_file(Path(os.path.abspath(path)))
    conversion = reader.finish()
    reader.refusals()  # (after finish: go-auth's options are judged there, together)
    return conversion


# ------------------------------------------------------------------- TOML


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)  # a JSON string is a TOML basic string


def to_toml(conv: Conversion, source: str) -> str:
    """The document as commented TOML (tables in load_config's order)."""
    out = [
        f"# Siskin configuration converted from {source} by `siskin convert-mosquitto-conf`.",
        "# What the Mosquitto file did not set keeps Siskin's default (docs/limits.md).",
    ]
    for note in conv.notes:
        out.append(f"# note: {note}")
    doc = conv.doc
    for table in ("server", "limits", "security", "log"):
        if table in doc:
            out += ["", f"[{table}]"]
            out += [f"{k} = {_value(v)}" for k, v in doc[table].items() if not isinstance(v, dict)]
            for name, sub in doc[table].items():
                if isinstance(sub, dict):  # [security.jwt], [security.http]
                    out += ["", f"[{table}.{name}]"]
                    out += [f"{k} = {_value(v)}" for k, v in sub.items()]
    for lst in doc.get("listener", ()):
        out += ["", "[[listener]]"]
        every = "  # every interface, IPv4 and IPv6 (as Mosquitto)"
        out += [
            f"{k} = {_value(v)}" + (every if k == "host" and v == "" else "") for k, v in lst.items() if k != "security"
        ]
        if "security" in lst:
            out += ["[listener.security]"] + [f"{k} = {_value(v)}" for k, v in lst["security"].items()]
    for bridge in doc.get("bridge", ()):
        out += ["", "[[bridge]]"]
        out += [f"{k} = {_value(v)}" for k, v in bridge.items() if k != "topic"]
        for rule in bridge["topic"]:
            out += ["", "[[bridge.topic]]"]
            out += [f"{k} = {_value(v)}" for k, v in rule.items()]
    return "\n".join(out) + "\n"
