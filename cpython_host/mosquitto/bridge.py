"""Mosquitto bridges (`connection` sections of a mosquitto.conf) as Siskin [[bridge]] tables.

`connection NAME` opens a bridge; the bridge options after it (address,
topic, remote_clientid, bridge_cafile, ...) belong to it until the next
`connection`. OPTIONS maps each to what sets the same in the [[bridge]]
table (common/bridge/settings.py), with a note where the meaning differs
a little; what has no equivalent is refused with the
reason (start_type lazy, TLS-PSK, bridge_insecure, ...), like any option of
cpython_host/mosquitto_conf.py. Mosquitto's defaults are written out where
Siskin's differ and matter: the QoS of a `topic` line (0), the remote
client id (HOSTNAME.NAME, so the upstream keeps the session it had),
notifications (on).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from common.bridge.settings import BRIDGE
from common.broker.limits import ConfigError


class _Reader(Protocol):
    """What the `connection` sections use of mosquitto_conf.py's reader
    (typed here, not imported: that module imports this one)."""

    where: str
    bridges: list[Bridge]

    def note(self, text: str) -> None: ...
    def unsupported(self, option: str, why: str) -> None: ...
    def bad(self, option: str, why: str) -> ConfigError: ...
    def one(self, option: str, args: list[str]) -> str: ...
    def boolean(self, option: str, args: list[str]) -> bool: ...
    def integer(self, option: str, args: list[str], low: int = 0) -> int: ...
    def path(self, option: str, args: list[str], base: Path) -> str: ...


DIRECTIONS = ("out", "in", "both")
PROTOCOLS = {"mqttv311": 4, "mqttv50": 5}
# The system's CA directories: Siskin's bridge uses the system's CAs when cafile is "".
SYSTEM_CAPATHS = ("/etc/ssl/certs", "/etc/ssl/certs/", "/etc/pki/tls/certs", "/etc/pki/tls/certs/")
SISKIN_KEYS = {entry[0] for entry in BRIDGE}


class Bridge:
    """One `connection` section: the [[bridge]] table it becomes."""

    def __init__(self, name: str, where: str) -> None:
        self.where = where
        # Mosquitto's bridges publish notifications unless told not to.
        self.table: dict[str, Any] = {"name": name, "notifications": True}
        self.topics: list[dict[str, Any]] = []
        self.outgoing_retain = True

    def finish(self, r: _Reader) -> dict[str, Any]:
        """The [[bridge]] table, its rules under "topic"."""
        table = self.table
        if "addresses" not in table:
            r.where = self.where
            raise r.bad("connection", f"bridge {table['name']!r} has no address line")
        # Mosquitto's remote client id: HOSTNAME.NAME; the upstream keeps the session it knows by it.
        table.setdefault("client_id", f"{socket.gethostname()}.{table['name']}")
        if not self.topics:
            r.where = self.where
            raise r.bad("connection", f"bridge {table['name']!r} has no topic line (Mosquitto needs one too)")
        rules = []
        for rule in self.topics:
            if not self.outgoing_retain and rule["direction"] != "in":
                # bridge_outgoing_retain false: retain cleared going up only.
                rules.append({**rule, "direction": "out", "retain": False})
                if rule["direction"] == "both":
                    rules.append({**rule, "direction": "in"})
            else:
                rules.append(rule)
        return {**table, "topic": rules}


def connection(r: _Reader, option: str, args: list[str], base: Path) -> None:
    name = r.one(option, args)
    if any(c in name for c in "/+#"):
        raise r.bad(option, f"{name!r}: a Siskin bridge name has no '/', '+' or '#' (it names $SYS topics)")
    r.bridges.append(Bridge(name, r.where))


def _set(key: str, convert: Callable[[_Reader, str, list[str], Path], Any]) -> Callable[..., None]:
    def handler(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
        bridge.table[key] = convert(r, option, args, base)

    return handler


def _one(r: _Reader, option: str, args: list[str], base: Path) -> str:
    return r.one(option, args)


def _text(r: _Reader, option: str, args: list[str], base: Path) -> str:
    return " ".join(args)  # a password may hold spaces: Mosquitto takes the rest of the line


def _bool(r: _Reader, option: str, args: list[str], base: Path) -> bool:
    return r.boolean(option, args)


def _int(r: _Reader, option: str, args: list[str], base: Path) -> int:
    return r.integer(option, args, 1)


def _path(r: _Reader, option: str, args: list[str], base: Path) -> str:
    return r.path(option, args, base)


def addresses(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    if not args:
        raise r.bad(option, "wants host[:port] (several: failover)")
    out = []
    for a in args:
        host, colon, port = a.rpartition(":")
        if not colon or host.endswith(":"):  # no port (an IPv6 address holds colons of its own)
            host, port = a, "1883"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise r.bad(option, f"{a!r}: wants host[:port]")
        out.append(f"{host}:{port}")
    bridge.table["addresses"] = out


def topic(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    """topic PATTERN [[[out | in | both] QOS] LOCAL_PREFIX REMOTE_PREFIX]"""
    words = ["" if a == '""' else a for a in args]
    if not 1 <= len(words) <= 5 or len(words) == 4:
        raise r.bad(option, "wants PATTERN [[[out | in | both] QOS] LOCAL_PREFIX REMOTE_PREFIX]")
    rule: dict[str, Any] = {"pattern": words[0], "direction": "out", "qos": 0}  # Mosquitto's defaults
    if len(words) >= 2:
        if words[1] not in DIRECTIONS:
            raise r.bad(option, f"direction {words[1]!r}: wants out, in or both")
        rule["direction"] = words[1]
    if len(words) >= 3:
        if words[2] not in ("0", "1", "2"):
            raise r.bad(option, f"QoS {words[2]!r}: wants 0, 1 or 2")
        rule["qos"] = int(words[2])
    if len(words) == 5:
        rule["local_prefix"], rule["remote_prefix"] = words[3], words[4]
    if not rule["pattern"] and not (rule.get("local_prefix") or rule.get("remote_prefix")):
        raise r.bad(option, 'an empty pattern ("") needs a prefix: it bridges that one topic')
    bridge.topics.append(rule)


def protocol(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    value = r.one(option, args)
    if value == "mqttv31":
        r.unsupported(option, "an MQTT 3.1 upstream; Siskin's bridge speaks 3.1.1 (mqttv311) and 5 (mqttv50)")
    elif value in PROTOCOLS:
        bridge.table["protocol"] = PROTOCOLS[value]
    else:
        raise r.bad(option, f"wants mqttv311, mqttv50 or mqttv31, not {value!r}")


def restart_timeout(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    # "restart_timeout N" (constant) or "restart_timeout BASE CAP" (exponential, jittered), seconds.
    if not 1 <= len(args) <= 2 or not all(a.isdigit() and int(a) > 0 for a in args):
        raise r.bad(option, "wants SECONDS or BASE CAP (whole seconds above 0)")
    bridge.table["backoff_min"] = float(args[0])
    bridge.table["backoff_max"] = float(args[-1])


def capath(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    value = r.one(option, args)
    if value in SYSTEM_CAPATHS:
        bridge.table["tls"] = True  # cafile "": the system's CAs, which that directory holds
        r.note(f"{option} {value}: the system's CAs (Siskin's bridge with tls = true and no cafile)")
    else:
        r.unsupported(option, "a CA directory other than the system's; use bridge_cafile (one PEM file)")


def insecure(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    if r.boolean(option, args):
        r.unsupported(option, "Siskin's bridge always checks the upstream's certificate and host name")


def tls_version(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    value = r.one(option, args)
    if value in ("tlsv1.2", "tlsv1.3"):
        r.note(f"{option} {value}: Siskin's bridge negotiates TLS 1.2 or newer (the newest both speak)")
    else:
        r.unsupported(option, f"{value}: Siskin's bridge speaks TLS 1.2 and 1.3 only")


def alpn(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    if "alpn" not in SISKIN_KEYS:
        r.unsupported(option, "this Siskin's bridge offers no ALPN protocols")
        return
    bridge.table["alpn"] = [r.one(option, args)]


def start_type(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    value = r.one(option, args)
    if value != "automatic":
        r.unsupported(
            option,
            f"{value}: Siskin's bridge connects at start and reconnects after each failure "
            "(start_type automatic); messages wait on disk while the upstream is away",
        )


def outgoing_retain(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
    bridge.outgoing_retain = r.boolean(option, args)


def noted(why: str) -> Callable[..., None]:
    def handler(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
        r.note(f"'{option}' has no Siskin setting: {why}")

    return handler


def refused(why: str) -> Callable[..., None]:
    def handler(r: _Reader, bridge: Bridge, option: str, args: list[str], base: Path) -> None:
        r.unsupported(option, why)

    return handler


LAZY_ONLY = "it matters with start_type lazy only, which Siskin does not have"
INSIDE = "Siskin's bridge is part of the broker: its local session needs no login"

# Bridge option -> handler(reader, bridge, option, args, base).
OPTIONS: dict[str, Callable[..., None]] = {
    "address": addresses,
    "addresses": addresses,
    "topic": topic,
    "remote_clientid": _set("client_id", _one),
    "remote_username": _set("username", _text),
    "remote_password": _set("password", _text),
    "local_clientid": _set("local_client_id", _one),
    "cleansession": _set("clean_session", _bool),
    "keepalive_interval": _set("keepalive", _int),
    "try_private": _set("bridge_bit", _bool),
    "bridge_protocol_version": protocol,
    "bridge_cafile": _set("cafile", _path),
    "bridge_certfile": _set("certfile", _path),
    "bridge_keyfile": _set("keyfile", _path),
    "bridge_capath": capath,
    "bridge_insecure": insecure,
    "bridge_tls_version": tls_version,
    "bridge_alpn": alpn,
    "restart_timeout": restart_timeout,
    "start_type": start_type,
    "bridge_outgoing_retain": outgoing_retain,
    "notifications": _set("notifications", _bool),
    "notification_topic": _set("notification_topic", _one),
    "notifications_local_only": _set("notifications_local_only", _bool),
    "idle_timeout": noted(LAZY_ONLY),
    "threshold": noted(LAZY_ONLY),
    "local_username": noted(INSIDE),
    "local_password": noted(INSIDE),
    "local_cleansession": noted(
        "Siskin's bridge keeps its local session (what waits for the upstream is on disk) either way"
    ),
    "round_robin": noted("Siskin tries the addresses in order after each failure, from the first"),
    "bridge_attempt_unsubscribe": noted("Siskin's bridge does not unsubscribe when it stops"),
    "bridge_max_packet_size": noted("Siskin's bridge announces no Maximum Packet Size (the upstream's own applies)"),
    "bridge_receive_maximum": noted("Siskin's bridge announces no Receive Maximum (max_inflight bounds what it sends)"),
    "bridge_max_topic_alias": noted("Siskin's bridge uses no topic aliases"),
    "bridge_session_expiry_interval": noted(
        "Siskin's bridge keeps its upstream session (cleansession false) with no expiry"
    ),
    "bridge_identity": refused("TLS-PSK is not supported; use bridge_cafile and certificates"),
    "bridge_psk": refused("TLS-PSK is not supported; use bridge_cafile and certificates"),
    "bridge_require_ocsp": refused("OCSP is not checked"),
    "bridge_bind_address": refused("Siskin's bridge connects from the address the system chooses"),
}
