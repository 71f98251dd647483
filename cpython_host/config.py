"""Configuration for the CPython host: a TOML file plus command-line flags.

A config file has these tables, all optional:

    [limits]     the broker's settings, named exactly as in common/broker/settings.py
                 (boards/linux.toml lists every one with what it does)
    [server]     socket options (SERVER below): host, port, backlog, write
                 buffer marks, close linger and shutdown timeout; data_dir
    [[listener]] one table per listening socket (LISTENER below): address,
                 port, protocol (MQTT, or MQTT over WebSockets with its path
                 and allowed origins) and, for TLS, the certificate, key and
                 client CA. Without
                 any, [server] host and port are the one plain listener; with
                 them, those two keys belong in a [[listener]] table instead.
    [log]        level = "debug" | "info" | "warning" | "error"
    [security]   users, access control, anonymous access (SECURITY below;
                 docs/security.md): password_file, acl_file, acl, allow_anonymous
    [http]       the HTTP listener (HTTP below; docs/monitoring.md): Prometheus
                 /metrics, the status page and `siskin ctl`'s API. Off
                 without the table.
    [[bridge]]   one table per upstream broker, with [[bridge.topic]] rules
                 (common/bridge/settings.py; docs/bridge.md)

A key before the first table, `include_dir = "conf.d"`, reads every *.toml
file of that directory (relative to this file's), in sorted order, as if it
were written here: its [[listener]] and [[bridge]] tables follow this file's,
its other tables' keys join this file's; a key set twice is an error naming
both files (a later file does not silently win). Relative names inside an
included file are taken from the main file's directory, like its own.

Precedence: a command-line flag beats the file, the file beats the default.
Every mistake (missing file, TOML syntax, unknown table or key, wrong type,
out-of-range value) raises ConfigError with a one-line message that names the
file, the key and what to do; the CLI prints it and exits with code 2. The
keys are checked by the core's one validator (common/broker/settings.py), the same
one the board's JSON goes through; this module only reads TOML.
"""

from __future__ import annotations

import importlib.util
import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.broker.settings import (
    HOST_SERVER_DEFAULTS,
    K_BOOL,
    K_CHOICE,
    K_INT,
    K_LIST,
    K_NUMBER,
    K_OBJECT,
    K_STR,
    LISTENER_RATE_KEYS,
    LISTENER_RATES,
    LOG_LEVEL_NAMES,
    ConfigError,
    check,
    defaults,
    new_settings,
    refuse_limits_keys,
    resolve,
    with_defaults,
)
from common.broker.settings import JWT as COMMON_JWT
from common.broker.settings import SECURITY as COMMON_SECURITY
from common.broker.settings import SERVER as COMMON_SERVER
from common.broker.settings import TLS as COMMON_TLS
from common.broker.settings_hint import did_you_mean
from common.mqttsn.settings import SN_KEYS, SN_LISTENER
from cpython_host.compat import tomllib

__all__ = ["LISTENER", "SECURITY", "SERVER", "ConfigError", "HostConfig", "Listener", "load_config", "load_security"]

# [server]: the schema of common/broker/settings.py, its SERVER keys with the
# host's defaults. Times are seconds, sizes bytes.
SERVER = (
    ("host", "127.0.0.1", K_STR, None, None),  # address to listen on
    ("port", 1883, K_INT, 0, 65535),  # TCP port (0 = any free port, logged at start)
    *with_defaults(COMMON_SERVER, HOST_SERVER_DEFAULTS),  # backlog, close_linger, shutdown_timeout
    ("write_buffer_high", 65536, K_INT, 0, None),  # bytes buffered for a client before its output is paused
    ("write_buffer_low", 16384, K_INT, 0, None),  # bytes at which a paused client's output resumes
    ("data_dir", "", K_STR, None, None),  # persistent state, as --data-dir (which beats it); "" = memory only
    ("warm_up", True, K_BOOL, None, None),  # PyPy: compile the connection paths before listening (warmup.py)
    ("epoll_hub", True, K_BOOL, None, None),  # plain MQTT listeners on the host's own epoll (epoll_hub.py)
)
# [[listener]]: TLS is on when certfile is set. Names as in mosquitto.conf.
IDENTITY_FIELDS = (
    "cn",
    "san_dns",
    "san_email",
    "san_uri",
    "subject",
)  # subject: the whole DN, as Mosquitto's use_subject_as_username
TLS_VERSIONS = ("tlsv1.2", "tlsv1.3")
PROTOCOLS = ("mqtt", "websockets", "mqtt-sn")
LISTENER: tuple[tuple[Any, ...], ...] = (
    ("host", "127.0.0.1", K_STR, None, None),  # address to listen on ("0.0.0.0": every IPv4 interface)
    ("port", -1, K_INT, 0, 65535),  # TCP port (required; 0 = any free port, logged at start)
    ("protocol", "mqtt", K_CHOICE, PROTOCOLS, None),  # "websockets": MQTT over WebSockets; "mqtt-sn": MQTT-SN v1.2 over UDP
    ("path", "/mqtt", K_STR, None, None),  # websockets: the URL path clients upgrade on; "" = any path
    ("origins", [], K_LIST, None, None),  # websockets: allowed Origin headers; [] = not checked
    *COMMON_TLS,  # certfile (TLS on), keyfile, cafile, require_certificate: PEM files
    ("use_identity_as_username", False, K_BOOL, None, None),  # the certificate's identity is the user name
    ("identity", "cn", K_CHOICE, IDENTITY_FIELDS, None),  # which field is the identity: CN or a SAN type
    ("tls_version", "tlsv1.2", K_CHOICE, TLS_VERSIONS, None),  # the oldest TLS version accepted
    ("ciphers", "", K_STR, None, None),  # OpenSSL cipher list for TLS 1.2 (1.3's are OpenSSL's); "" = Python's default
    (
        "crlfile",
        "",
        K_STR,
        None,
        None,
    ),  # PEM revocation list(s) of cafile's CA: a revoked client certificate is refused
    # -- per listener (Mosquitto's per_listener_settings; common/broker/listener_policy.py) --
    ("mount_point", "", K_STR, None, None),  # a prefix put before every topic its clients name; "" = none
    ("security", None, K_OBJECT, None, None),  # [listener.security]: its own users, ACL, anonymous switch
    # its own rate_messages, rate_bytes, rate_subscribes (each client's),
    # listener_rate_* (its clients together) and rate_connects (per source
    # address); not set: [limits]'s; 0: off on this listener (docs/limits.md)
    *LISTENER_RATES,
    # -- protocol = "mqtt-sn" only (common/mqttsn/settings.py; docs/mqtt-sn.md) --
    *SN_LISTENER,
)
# [log]
LOG = (
    ("level", "info", K_CHOICE, LOG_LEVEL_NAMES, None),  # how much to log (case does not matter)
    ("syslog", "", K_STR, None, None),  # a syslog socket ("/dev/log") to log to as well; "" none
)
# [security] (docs/security.md). A key left out is "not set": no password
# file, no ACL, and allow_anonymous decided by the listener (loopback only).
SECURITY = (
    *COMMON_SECURITY,  # password_file, acl_file, allow_anonymous
    ("acl", None, K_LIST, None, None),  # the acl_file rules as tables: {user, topic | pattern, access}
)
# [security.jwt] (docs/security.md "JWT logins"): on when the table is present.
JWT: tuple[tuple[Any, ...], ...] = (
    *COMMON_JWT[:2],  # secret_file, secret
    ("public_key_file", None, K_STR, None, None),  # PEM public key or certificate: RSA, EC or Ed25519
    ("jwks_url", None, K_STR, None, None),  # a key set (JWKS) fetched at start and kept fresh (https://)
    ("jwks_refresh", 300, K_NUMBER, 10, None),  # s between two fetches of jwks_url (also one on an unknown kid)
    *COMMON_JWT[2:],  # algorithms, token_in, issuer, audience, leeway, require_exp, user_claim, acl_claim, max_token_bytes
)
# [security.http] (docs/security.md "The HTTP auth hook"): on when the table is present.
AUTH_HOOK: tuple[tuple[Any, ...], ...] = (
    ("url", "", K_STR, None, None),  # where each CONNECT's check is POSTed (http:// or https://); required
    ("acl_url", "", K_STR, None, None),  # where each PUBLISH's and SUBSCRIBE's check is POSTed; "" = none
    ("timeout", 2.0, K_NUMBER, 0.05, 30),  # s for the whole answer; then "no answer"
    ("cache_ttl", 300, K_NUMBER, 0, None),  # s an allow is used without asking again
    ("negative_ttl", 30, K_NUMBER, 0, None),  # s a refusal is used without asking again
    ("offline_grace", 600, K_NUMBER, 0, None),  # s an allow still lets its client in while the service does not answer
    ("response", "json", K_CHOICE, ("json", "status"), None),  # "status": any 2xx allows, 4xx refuses
    ("max_pending", 64, K_INT, 1, 10000),  # checks in flight at most; one more is "no answer"
    ("cache_entries", 10000, K_INT, 1, None),  # answers kept (the oldest goes first)
)
# [http] (docs/monitoring.md): on when the table is present.
HTTP_AUTH = ("auto", "basic")
HTTP: tuple[tuple[Any, ...], ...] = (
    ("host", "127.0.0.1", K_STR, None, None),  # address to listen on (loopback: no login needed with auth = "auto")
    ("port", 9883, K_INT, 0, 65535),  # TCP port (0 = any free port, logged at start)
    ("certfile", "", K_STR, None, None),  # PEM: the server's certificate (then its chain); HTTPS on
    ("keyfile", "", K_STR, None, None),  # PEM: the certificate's private key, unencrypted
    ("auth", "auto", K_CHOICE, HTTP_AUTH, None),  # "auto": basic auth unless loopback-only; "basic": always
    ("sample_interval", 5, K_INT, 1, 3600),  # s between the status page's throughput samples (it keeps 120)
    ("admins", [], K_LIST, None, None),  # users who may act (kick, drop, clear); others see only their own
    ("head_timeout", 5.0, K_NUMBER, 0.1, 60),  # s for a request's head to arrive (slowloris), then 408
)
TABLES = ("limits", "server", "listener", "log", "security", "http", "bridge")
ARRAYS = ("listener", "bridge")  # arrays of tables: an included file's follow the main file's


class Listener:
    """One listening socket: the checked values of a [[listener]] table, as attributes."""

    host: str
    port: int
    certfile: str
    keyfile: str
    cafile: str
    require_certificate: bool
    use_identity_as_username: bool
    identity: str
    tls_version: str
    ciphers: str
    crlfile: str
    protocol: str
    path: str
    origins: list[str]
    mount_point: str
    security: dict[str, Any] | None
    rates: dict[str, int]  # the LISTENER_RATES keys it sets (Limits.per_listener)
    # protocol = "mqtt-sn" (common/mqttsn/settings.py SN_LISTENER)
    gw_id: int
    max_clients: int
    max_topic_ids: int
    predefined: dict[str, str]
    max_buffered: int
    max_packet_size: int
    session_expiry: int
    retry_interval: int
    max_retries: int
    advertise_interval: int
    advertise_to: str
    allow_remote: bool
    keys: dict[str, str]

    def __init__(self, where: str, values: dict[str, Any], key: int = 0) -> None:
        self.where = where  # names the table in messages: "site.toml: [[listener]] #2"
        self.key = key  # its index among the listeners: the core's listener key (peer[3], listener_policy.py)
        for name, value in defaults(LISTENER).items():
            setattr(self, name, values.get(name, value))
        self.rates = {name: values[name] for name in values if name in LISTENER_RATE_KEYS}

    @property
    def tls(self) -> bool:
        return bool(self.certfile)

    @property
    def websockets(self) -> bool:
        return self.protocol == "websockets"

    @property
    def mqttsn(self) -> bool:
        return self.protocol == "mqtt-sn"

    def sn_values(self) -> dict[str, Any]:
        """An MQTT-SN listener's own keys (common/mqttsn/settings.py's sn_settings reads them)."""
        return {name: getattr(self, name) for name in SN_KEYS}


def _listener(where: str, body: Any, base: Path, key: int) -> Listener:
    """A [[listener]] table, checked; its relative file names are taken from `base` (the config file's directory)."""
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: must be a table ([[listener]] with keys under it).")
    refuse_limits_keys(where, body, LISTENER)  # (rate_grace and the like: told to go to [limits])
    values = check(where, body, LISTENER)
    for name in ("certfile", "keyfile", "cafile", "crlfile"):
        if values.get(name):
            values[name] = resolve(str(base), values[name])
    if "security" in values:
        values["security"] = _security(f"{where}: [listener.security]", values["security"], base)
    mount = values.get("mount_point", "")
    if any(c in mount for c in "+#\0") or mount.startswith("$"):
        raise ConfigError(
            f'{where}: mount_point = {mount!r}: wants a topic prefix without +, # or a leading $, e.g. "site1/".'
        )
    lst = Listener(where, values, key)
    if "port" not in body:
        raise ConfigError(f"{where}: port is missing; add e.g. port = 1883 (plain) or port = 8883 (TLS).")
    files = (
        "keyfile",
        "cafile",
        "require_certificate",
        "use_identity_as_username",
        "identity",
        "tls_version",
        "ciphers",
        "crlfile",
    )
    if not lst.tls:
        for name in files:
            if name in body:
                raise ConfigError(f"{where}: {name} is set but certfile is not; TLS needs certfile and keyfile.")
    elif not lst.keyfile:
        raise ConfigError(f"{where}: certfile is set but keyfile is not; add the path of its private key (PEM).")
    if lst.require_certificate and not lst.cafile:
        raise ConfigError(
            f"{where}: require_certificate = true needs cafile, the CA that signs the clients' certificates."
        )
    if lst.crlfile and not lst.cafile:
        raise ConfigError(f"{where}: crlfile needs cafile, the CA whose revocations it lists.")
    if lst.use_identity_as_username and not lst.require_certificate:
        raise ConfigError(
            f"{where}: use_identity_as_username = true needs require_certificate = true "
            "(a client without a certificate would have no identity)."
        )
    if lst.mqttsn:
        _sn_listener(where, body, lst)
    else:
        for name in SN_KEYS:
            if name in body:
                raise ConfigError(f'{where}: {name} is set but protocol is not "mqtt-sn"; add protocol = "mqtt-sn".')
    if not lst.websockets:
        for name in ("path", "origins"):
            if name in body:
                raise ConfigError(
                    f'{where}: {name} is set but protocol is not "websockets"; add protocol = "websockets".'
                )
    else:
        if lst.path and not lst.path.startswith("/"):
            raise ConfigError(f'{where}: path = {lst.path!r}: wants a URL path such as "/mqtt", or "" for any path.')
        if importlib.util.find_spec("wsproto") is None:
            raise ConfigError(
                f'{where}: protocol = "websockets" needs the Python package wsproto, which is not installed; '
                "install it (pip install wsproto) or remove the listener."
            )
    return lst


def _sn_listener(where: str, body: dict[str, Any], lst: Listener) -> None:
    """An MQTT-SN listener (UDP): no TLS (v1.2 has no DTLS here), and off
    loopback only with keys (every datagram sealed) or allow_remote, as v1.2
    has no authentication."""
    if lst.tls:
        raise ConfigError(f'{where}: certfile is set but protocol = "mqtt-sn" is UDP without TLS; remove certfile.')
    from common.mqttsn.settings import sn_settings

    sn_settings(where, lst.sn_values(), True, lst.key)  # the predefined topic ids and keys checked
    if not loopback_name(lst.host) and not lst.allow_remote and not lst.keys:
        raise ConfigError(
            f'{where}: protocol = "mqtt-sn" on host {lst.host!r}, which is not loopback: MQTT-SN v1.2 has no '
            "authentication, so anyone who can reach this UDP port would publish and subscribe as an anonymous "
            'client; give its clients keys (keys = { "client id" = "32 hex digits" }: every datagram sealed, '
            "docs/mqtt-sn.md), or set allow_remote = true to serve it anyway (with allow_anonymous and an ACL for "
            'its clients), or host = "127.0.0.1".'
        )


def loopback_name(host: str) -> bool:
    """Whether `host` (as written in a config) names loopback addresses only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class HttpConfig:
    """The [http] table, checked: the HTTP listener for /metrics, the status page and the API."""

    host: str
    port: int
    certfile: str
    keyfile: str
    auth: str
    sample_interval: int
    admins: list[str]
    head_timeout: float

    def __init__(self, where: str, values: dict[str, Any]) -> None:
        self.where = where
        for name, value in defaults(HTTP).items():
            setattr(self, name, values.get(name, value))

    @property
    def tls(self) -> bool:
        return bool(self.certfile)

    @property
    def require_auth(self) -> bool:
        """HTTP basic auth against the [security] users: always with auth = "basic", else off loopback."""
        return self.auth == "basic" or not loopback_name(self.host)

    def listener(self) -> Listener:
        """As a Listener, for cpython_host/tls.py's server_context."""
        return Listener(self.where, {"certfile": self.certfile, "keyfile": self.keyfile})

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if host in ("0.0.0.0", "[::]", ""):
            host = "127.0.0.1"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


def _http(where: str, body: Any, base: Path, security: dict[str, Any]) -> HttpConfig:
    """The [http] table, checked; refused when it would send passwords in the clear or have none to check."""
    values = check(where, body, HTTP)
    for name in ("certfile", "keyfile"):
        values[name] = resolve(str(base), values.get(name, ""))
    http = HttpConfig(where, values)
    if http.certfile and not http.keyfile:
        raise ConfigError(f"{where}: certfile is set but keyfile is not; add the path of its private key (PEM).")
    if http.keyfile and not http.certfile:
        raise ConfigError(f"{where}: keyfile is set but certfile is not; HTTPS needs both.")
    if http.admins and not http.require_auth:
        raise ConfigError(
            f'{where}: admins is set but this listener asks no login (loopback with auth = "auto"): '
            'every request from this machine acts as an administrator; set auth = "basic", or remove admins.'
        )
    if http.require_auth:
        why = 'auth = "basic"' if http.auth == "basic" else f"host {http.host!r} is not loopback-only"
        if security.get("password_file") is None:
            raise ConfigError(
                f"{where}: {why}, so the HTTP listener asks for a user name and password (HTTP basic auth) "
                "of the MQTT users: set [security] password_file, or listen on 127.0.0.1."
            )
        if not http.tls and not loopback_name(http.host):
            raise ConfigError(
                f"{where}: {why}: HTTP basic auth would send the MQTT users' passwords in the clear; "
                "set certfile and keyfile (HTTPS), or listen on 127.0.0.1."
            )
    return http


class HostConfig:
    """The host's whole configuration: the broker's Settings plus SERVER and the log level."""

    host: str
    port: int
    backlog: int
    write_buffer_high: int
    write_buffer_low: int
    close_linger: float
    shutdown_timeout: float
    data_dir: str
    warm_up: bool
    epoll_hub: bool

    def __init__(self) -> None:
        self.source = "built-in defaults"  # where the settings came from, for the log
        self.path: Path | None = None  # the config file (re-read on SIGHUP)
        self.reader: Callable[[str], dict[str, Any]] | None = None  # how to read it, when not TOML
        self.security: dict[str, Any] = {}  # [security] as written (keys not set are absent)
        self.limits: dict[str, Any] = {}
        self.settings = new_settings()
        self.log_level = "info"
        self.log_level_flag: str | None = None  # --log-level: beats [log] level, at start and on SIGHUP
        self.syslog = ""  # [log] syslog: the socket's path, "" none
        self.apply(defaults(SERVER))
        # [[listener]] tables; None: the one plain listener [server] host:port
        self.listener_tables: list[Listener] | None = None
        self.http: HttpConfig | None = None  # [http]; None: no HTTP listener
        self.bridges: list[Any] = []  # [[bridge]] tables (common/bridge/settings.py BridgeSettings)

    def listeners(self) -> list[Listener]:
        """Every listener, in the file's order (--host/--port have changed the first)."""
        if self.listener_tables is None:
            return [Listener("[server]", {"host": self.host, "port": self.port})]
        return self.listener_tables

    def set_address(self, host: str | None, port: int | None) -> None:
        """--host / --port: the first listener's address."""
        first = self.listener_tables[0] if self.listener_tables else self
        if host is not None:
            first.host = host
        if port is not None:
            first.port = port

    def apply(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            setattr(self, name, value)


def load_config(path: str | None, reader: Callable[[str], dict[str, Any]] | None = None) -> HostConfig:
    """Read a TOML config file (None: the defaults); raises ConfigError.

    `reader` turns another format into the same tables (--mosquitto-conf:
    cpython_host/mosquitto_conf.py); it is kept for SIGHUP's re-read.
    """
    cfg = HostConfig()
    if path is None:
        return cfg
    p = Path(path)
    try:
        if reader is not None:
            doc = reader(path)
        else:
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
    cfg.reader = reader
    included: list[str] = []
    if reader is None and "include_dir" in doc:
        doc = _with_included(p, doc, included)
    try:
        _read_tables(cfg, path, p, doc)
    except ConfigError as e:
        if included:  # the error names the main file: say which files were read with it
            raise ConfigError(f"{e} (with include_dir {included[0]}: {', '.join(included[1:]) or 'no file'})") from None
        raise
    return cfg


def _read_tables(cfg: HostConfig, path: str, p: Path, doc: dict[str, Any]) -> None:
    """Check each table of `doc` (read from `path`) into `cfg`."""
    for table, body in doc.items():
        if table not in TABLES:
            raise ConfigError(
                f"{path}: unknown table [{table}]{did_you_mean(table, TABLES)} Use [limits], [server], "
                "[[listener]], [log], [security], [http] and [[bridge]]."
            )
        if table == "bridge":
            pass  # checked by parse_bridges
        elif table == "listener":
            if not isinstance(body, list) or not body:
                raise ConfigError(f"{path}: listener must be tables ([[listener]], one per socket).")
        elif not isinstance(body, dict):
            raise ConfigError(f"{path}: {table} must be a table ([{table}]), not a value.")
    cfg.limits = dict(doc.get("limits", {}))
    cfg.settings = new_settings(cfg.limits, f"{path}: [limits]")
    cfg.apply(check(f"{path}: [server]", doc.get("server", {}), SERVER))
    if "listener" in doc:
        for name in ("host", "port"):
            if name in doc.get("server", {}):
                raise ConfigError(
                    f"{path}: [server] {name} and [[listener]] tables: move {name} into a [[listener]] table "
                    "(with [[listener]] tables, they say where to listen)."
                )
        cfg.listener_tables = [
            _listener(f"{path}: [[listener]] #{i}", body, p.parent, i - 1) for i, body in enumerate(doc["listener"], 1)
        ]
        cfg.settings.per_listener = {lst.key: lst.rates for lst in cfg.listener_tables if lst.rates}
    if cfg.write_buffer_low > cfg.write_buffer_high:
        raise ConfigError(f"{path}: [server]: write_buffer_low must not exceed write_buffer_high.")
    log = {k: v.lower() if isinstance(v, str) and k == "level" else v for k, v in doc.get("log", {}).items()}
    log = check(f"{path}: [log]", log, LOG)
    cfg.log_level = log.get("level", cfg.log_level)
    cfg.syslog = log.get("syslog", cfg.syslog)
    if "bridge" in doc:
        from common.bridge.settings import parse_bridges

        cfg.bridges = parse_bridges(str(path), doc["bridge"])
        for b in cfg.bridges:
            for name in ("cafile", "certfile", "keyfile"):
                setattr(b, name, resolve(str(p.parent), getattr(b, name)))
    security = doc.get("security", {})
    cfg.security = _security(f"{path}: [security]", {k: v for k, v in security.items() if k not in ("jwt", "http")})
    if "jwt" in security:
        if not isinstance(security["jwt"], dict):
            raise ConfigError(f"{path}: [security] jwt wants a table [security.jwt].")
        cfg.security["jwt"] = check(f"{path}: [security.jwt]", security["jwt"], JWT)
    if "http" in security:
        if not isinstance(security["http"], dict):
            raise ConfigError(f"{path}: [security] http wants a table [security.http].")
        hook = cfg.security["http"] = check(f"{path}: [security.http]", security["http"], AUTH_HOOK)
        if not str(hook.get("url", "")).startswith(("http://", "https://")):
            raise ConfigError(f"{path}: [security.http]: url wants http://HOST[:PORT]/PATH or https://...; set it.")
    if "http" in doc:
        cfg.http = _http(f"{path}: [http]", doc["http"], p.parent, cfg.security)


def _with_included(path: Path, doc: dict[str, Any], included: list[str]) -> dict[str, Any]:
    """`doc` with the files of its include_dir joined in (see the module's
    docstring); `included` gets the directory's name, then each file's."""
    name = doc.pop("include_dir")
    if not isinstance(name, str) or not name:
        raise ConfigError(f'{path}: include_dir wants a directory name, e.g. include_dir = "conf.d".')
    folder = Path(resolve(str(path.parent), name))
    if not folder.is_dir():
        raise ConfigError(f"{path}: include_dir {name!r}: {folder} is not a directory; create it or fix the name.")
    origin: dict[tuple[str, ...], Path] = {}  # a key's path -> the file that set it
    _note_origin(origin, (), doc, path)
    included.append(name)
    for part in sorted(folder.glob("*.toml")):
        included.append(part.name)
        try:
            with part.open("rb") as f:
                extra = tomllib.load(f)
        except OSError as e:
            raise ConfigError(f"{part} (include_dir of {path}): cannot read it: {e.strerror}.") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{part} (include_dir of {path}): not valid TOML: {e}; fix the syntax.") from None
        if "include_dir" in extra:
            raise ConfigError(f"{part}: include_dir inside an included file; only {path} may include.")
        _join(doc, extra, (), origin, part)
    return doc


def _note_origin(origin: dict[tuple[str, ...], Path], at: tuple[str, ...], table: dict[str, Any], path: Path) -> None:
    for key, value in table.items():
        if at == () and key in ARRAYS:
            continue
        here = (*at, key)
        if isinstance(value, dict):
            _note_origin(origin, here, value, path)
        else:
            origin[here] = path


def _join(
    into: dict[str, Any], extra: dict[str, Any], at: tuple[str, ...], origin: dict[tuple[str, ...], Path], part: Path
) -> None:
    """Put `extra`'s keys into `into`: arrays of tables appended, tables merged, a key set twice refused."""
    for key, value in extra.items():
        here = (*at, key)
        if at == () and key in ARRAYS and isinstance(value, list):
            into.setdefault(key, [])
            if not isinstance(into[key], list):
                raise ConfigError(f"{part}: [[{key}]] tables, but {origin.get(here)} sets {key} otherwise.")
            into[key].extend(value)
        elif isinstance(value, dict) and isinstance(into.get(key, {}), dict):
            _join(into.setdefault(key, {}), value, here, origin, part)
        elif key in into:
            where = ".".join(here)
            raise ConfigError(f"{part}: {where} is set in {origin.get(here)} too; keep it in one file.")
        else:
            into[key] = value
            origin[here] = part


def _security(where: str, body: Any, base: Path | None = None) -> dict[str, Any]:
    """A [security] table's users, ACL and anonymous keys, checked (also a
    [listener.security], whose relative file names are taken from `base`)."""
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: wants a table of password_file, acl_file, acl, allow_anonymous.")
    # The rules are tables: checked by Acl.from_rules, not as a list of strings.
    values: dict[str, Any] = check(where, {k: v for k, v in body.items() if k != "acl"}, SECURITY)
    acl = body.get("acl")
    if acl is not None:
        if not isinstance(acl, list):
            raise ConfigError(f"{where}: acl wants a list of tables {{user, topic | pattern, access}}.")
        values["acl"] = acl
    for name in ("password_file", "acl_file"):
        if base is not None and values.get(name) is not None:
            values[name] = resolve(str(base), values[name])
    return values


def load_security(cfg: HostConfig) -> tuple[Any, Any, bool | None, dict[int, Any]]:
    """(Users or None, Acl or None, allow_anonymous, listener policies) from
    [security], each [listener.security] and mount_point, and the files they
    name; ConfigError "FILE:LINE: reason" for a file it cannot use. The
    policies: listener key -> common/broker/listener_policy.ListenerPolicy,
    for the listeners with security or a mount point of their own.

    A relative file name is taken from the config file's directory.
    """
    base = str(cfg.path.parent) if cfg.path is not None else ""
    users, acl = _load(cfg.security, base, f"{cfg.source}: [security] acl")
    policies: dict[int, Any] = {}
    for lst in cfg.listeners():
        if lst.security is None and not lst.mount_point:
            continue
        from common.broker.listener_policy import ListenerPolicy

        if lst.security is None:
            policies[lst.key] = ListenerPolicy(False, mount=lst.mount_point)
            continue
        own = _load(lst.security, base, f"{lst.where}: [listener.security] acl")
        policies[lst.key] = ListenerPolicy(True, *own, lst.security.get("allow_anonymous"), lst.mount_point)
    return users, acl, cfg.security.get("allow_anonymous"), policies


def _load(sec: dict[str, Any], base: str, rules_source: str) -> tuple[Any, Any]:
    from common.broker.security_files import load_security as load

    named = {key: None if sec.get(key) is None else resolve(base, sec[key]) for key in ("password_file", "acl_file")}
    users, acl = load(
        lambda name, key: _read(Path(name), key), acl_rules=sec.get("acl"), rules_source=rules_source, **named
    )
    return users, acl


def _read(path: Path, key: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {key}: {e.strerror}.") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the {key} is not UTF-8 text.") from None
