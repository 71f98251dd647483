# Board settings and the device config, read from JSON (MicroPython has json,
# not tomllib). The keys are checked by the core's one validator
# (common/broker/settings.py `check`, the same one the host's TOML goes through);
# this module only reads JSON and adds the board's cross-checks.
#
# A board file (boards/esp32.json, boards/rp2040_picow.json) is
#
#   {"limits": {...}, "server": {...}}
#
# "limits" overrides common/broker/settings.py LIMITS by name; "server" holds the
# shell's own knobs (SERVER below). Keys starting with "_" are comments (JSON
# has none) and ignored, at any level of these files.
#
# The device config (/siskin.json on the board) says which board file to
# use and holds what differs per device: Wi-Fi, port, log level, storage key
# file; it may also carry "limits" and "server" objects that override the
# board file's. docs/boards.md lists every key.
#
# A freshly flashed board has neither file: the image carries the board
# files (firmware/manifest.py freezes them as the module `siskin_boards`),
# the board is recognised from what the port says it runs on, and the
# device config's defaults apply (Wi-Fi: the provisioning access point).

import json
from errno import ENOENT

from common.broker.settings import (
    JWT,
    K_BOOL,
    K_CHOICE,
    K_INT,
    K_OBJECT,
    K_STR,
    LIMITS,
    LIMITS_DOC,
    LOG_LEVEL_NAMES,
    SECURITY,
    TLS,
    ConfigError,
    check,
    defaults,
    new_settings,
    resolve,
    update_settings,
)
from common.broker.settings import SERVER as COMMON_SERVER

# The shell's knobs, in the schema form of common/broker/settings.py. Sizes in
# bytes, times in seconds.
SERVER = (
    # Sockets the shell may hold open at once, the listener included. Keep it
    # at or below the lwIP limit of the firmware (docs/boards.md): accepting
    # beyond it would fail inside lwIP instead of being refused by us.
    ("max_sockets", 10, K_INT, 2, None),  # the listener and one client at least
    ("read_buffer", 1024, K_INT, 64, None),  # bytes read from a socket at once into a slot's buffer
) + COMMON_SERVER + (  # backlog, close_linger, shutdown_timeout (common/broker/settings.py)
    ("heap_report", 0, K_INT, 0, None),  # s between "heap free=... alloc=..." lines on stdout, 0 = never
    # Bytes allocated between two collections from the store's restore on and
    # while serving (gc.threshold); 0 = collect only when the heap is full,
    # which fragments it: then the largest packet finds no block at the
    # limits, nor a restart over a full store its read buffers (docs/boards.md).
    ("gc_threshold", 16384, K_INT, 0, None),
    # A store that cannot be opened (missing directory, full or read-only file
    # system): false = stop at the REPL with the reason; true = log it and
    # serve without persistence. Never a reset loop (firmware/app.py).
    ("storage_optional", False, K_BOOL, None, None),
)

# The device config.
DEVICE = (
    ("board", None, K_STR, None, None),  # boards/<name>.json, or a path ending in .json; null: recognised (MACHINES)
    ("host", "0.0.0.0", K_STR, None, None),  # address to listen on
    ("port", 1883, K_INT, 0, 65535),  # TCP port
    ("log_level", "info", K_CHOICE, LOG_LEVEL_NAMES, None),  # how much to print
    ("wifi_ssid", "", K_STR, None, None),  # empty: no station mode, straight to the access point
    ("wifi_password", "", K_STR, None, None),
    ("wifi_attempts", 6, K_INT, 0, None),  # station attempts (backoff 1, 2, 4 ... 32 s) before the AP
    ("wifi_timeout", 15, K_INT, 0, None),  # s one attempt may take
    ("hostname", "siskin", K_STR, None, None),  # the station's DHCP/mDNS name
    ("ap_ssid", "siskin-setup", K_STR, None, None),  # the provisioning access point
    ("ap_password", "", K_STR, None, None),  # 8+ characters for WPA2, empty = open
    # The store: a littlefs path, "partition:NAME" (raw flash) or "none"
    # (firmware/storage.py).
    ("storage", "/siskin.store", K_STR, None, None),
    ("storage_key_file", "/siskin.key", K_STR, None, None),  # AES key (hex); absent file = store not encrypted
    ("watchdog_ms", 8000, K_INT, 0, None),  # machine.WDT timeout, 0 = no watchdog
    # Users, access control, anonymous access (docs/security.md): files on
    # the board's filesystem (password_file: SHA-256 lines, MicroPython has
    # no SHA-512). Not set, anonymous clients are served only when the board
    # listens on loopback (never on Wi-Fi).
) + SECURITY + (
    # TLS on the listener (docs/security.md): DER files on the board's
    # filesystem (tools/deploy --certfile/--keyfile/--cafile converts PEM);
    # certfile set = MQTT over TLS only (port 8883 by convention); cafile:
    # the one CA that signs client certificates (with require_certificate).
) + TLS + (
    ("limits", {}, K_OBJECT, None, None),  # overrides of the board file's limits
    ("server", {}, K_OBJECT, None, None),  # overrides of the board file's server knobs
)
BOARD = (
    ("limits", {}, K_OBJECT, None, None),  # common/broker/settings.py LIMITS
    ("server", {}, K_OBJECT, None, None),  # SERVER above
)
_DEVICE_DOC = "docs/boards.md"  # explains every key of DEVICE and BOARD

# The board file for what the port says it runs on (sys.implementation._machine,
# e.g. "Raspberry Pi Pico W with RP2040", "Generic ESP32 module with ESP32",
# "Generic ESP32 module with SPIRAM with ESP32"): the first whose words all
# appear in it, case ignored.
MACHINES = (
    (("pico w", "rp2040"), "rp2040_picow"),
    # The plain Pico (a modem gateway over PPP): the same chip, lwIP and
    # sockets as the Pico W, and 9 KB more heap (no CYW43).
    (("pico", "rp2040"), "rp2040_picow"),
    (("spiram", "esp32"), "esp32_psram"),
    (("esp32",), "esp32"),
)


def detect_board(machine):
    """The board file's name for `machine`; ConfigError when it is none of MACHINES."""
    m = machine.lower()
    for words, name in MACHINES:
        if all(w in m for w in words):
            return name
    raise ConfigError(
        'cannot tell which board settings fit %r: set "board" in the device config'
        ' (a file of boards/, e.g. "rp2040_picow", or a path ending in .json; docs/boards.md)' % machine
    )


def builtin_board(name):
    """The JSON text of boards/<name>.json frozen into the image, or None."""
    try:
        from siskin_boards import BOARDS
    except ImportError:  # not a frozen image
        return None
    return BOARDS.get(name)


def read_json(path, builtin=None):
    """The object in the JSON file `path`; if there is no such file, the one
    in `builtin` (JSON text, when given)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        if builtin is None or e.args[0] != ENOENT:
            raise ConfigError("%s: cannot read (%s)" % (path, e))
        text = builtin
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError("%s: not valid JSON (%s); fix the syntax." % (path, e))
    if not isinstance(data, dict):
        raise ConfigError("%s: must hold a JSON object {...}" % path)
    return data


def _strip_comments(obj):
    out = {}
    for key in obj:
        if not key.startswith("_"):
            out[key] = obj[key]
    return out


def load_board(path, limits=None, server=None, builtin=None):
    """(limits.Limits, server options) from a board file (else the `builtin` JSON
    text) plus optional overrides."""
    data = check(path, _strip_comments(read_json(path, builtin)), BOARD, _DEVICE_DOC)
    settings = new_settings(_strip_comments(data.get("limits", {})), path + ": limits")
    if limits:
        update_settings(settings, _strip_comments(limits), path + ": limits overridden by the device config")
    opts = defaults(SERVER)
    opts.update(check(path + ": server", _strip_comments(data.get("server", {})), SERVER))
    if server:
        opts.update(check(path + ": server overridden by the device config", _strip_comments(server), SERVER))
    if settings.max_connections >= opts["max_sockets"] - 1:
        # One slot at least must be left to refuse the client after the last
        # (3.1.1 CONNACK 0x03, v5 0x89); without it a full broker could only close.
        raise ConfigError(
            "%s: max_connections (%d) must be below max_sockets - 1 (%d): one socket is the listener"
            " and one at least answers refusals" % (path, settings.max_connections, opts["max_sockets"] - 1)
        )
    return settings, opts


def board_path(root, board):
    if board.endswith(".json"):
        return board
    return "%s/boards/%s.json" % (root, board) if root else "boards/%s.json" % board


def load_device(path, missing_ok=False):
    """The device config as a dict with every key (defaults filled in); with
    `missing_ok`, no file at `path` means the defaults."""
    cfg = defaults(DEVICE)
    data = _strip_comments(read_json(path, "{}" if missing_ok else None))
    bridges = data.pop("bridge", None)
    ppp = data.pop("ppp", None)
    jwt = data.pop("jwt", None)
    sn = data.pop("mqttsn", None)
    cfg.update(check(path, data, DEVICE, _DEVICE_DOC))
    cfg["ppp"] = None
    if ppp is not None:
        # The PPP uplink over a modem's UART (docs/boards.md); imported only then.
        from common.uplink.settings import parse_ppp

        cfg["ppp"] = parse_ppp(path, ppp)
    cfg["jwt"] = None
    if jwt is not None:
        # JWT logins (docs/security.md "JWT logins"): HMAC secrets only on a board.
        if not isinstance(jwt, dict):
            raise ConfigError('%s: jwt wants an object ({"secret_file": ...}; %s)' % (path, _DEVICE_DOC))
        cfg["jwt"] = check(path + ": jwt", _strip_comments(jwt), JWT, _DEVICE_DOC)
    cfg["mqttsn"] = None
    if sn is not None:
        # An MQTT-SN gateway on a UDP port (docs/mqtt-sn.md); imported only then.
        from common.mqttsn.settings import SN_LISTENER

        if not isinstance(sn, dict):
            raise ConfigError('%s: mqttsn wants an object ({"port": 1884, ...}; docs/mqtt-sn.md)' % path)
        schema = (("port", 1884, K_INT, 1, 65535),) + SN_LISTENER
        cfg["mqttsn"] = defaults(schema)
        cfg["mqttsn"].update(check(path + ": mqttsn", _strip_comments(sn), schema, "docs/mqtt-sn.md"))
    cfg["bridge"] = []
    if bridges is not None:
        # The host's [[bridge]] tables as a list of objects, each with its
        # "topic" rules (docs/bridge.md); imported only when there are some.
        from common.bridge.settings import parse_bridges

        cfg["bridge"] = parse_bridges(path, bridges)
    # A relative file name is taken from the device config's directory, as
    # the host takes its config file's (settings.resolve).
    base = path[: path.rfind("/") + 1]
    for key in ("password_file", "acl_file", "certfile", "keyfile", "cafile"):
        if cfg[key] is not None:
            cfg[key] = resolve(base, cfg[key])
    if cfg["jwt"] is not None and cfg["jwt"].get("secret_file") is not None:
        cfg["jwt"]["secret_file"] = resolve(base, cfg["jwt"]["secret_file"])
    for b in cfg["bridge"]:
        b.cafile = resolve(base, b.cafile)
        b.certfile = resolve(base, b.certfile)
        b.keyfile = resolve(base, b.keyfile)
    # The overrides are checked here too, so that a mistake names this file.
    cfg["limits"] = check(path + ": limits", _strip_comments(cfg["limits"]), LIMITS, LIMITS_DOC)
    cfg["server"] = check(path + ": server", _strip_comments(cfg["server"]), SERVER)
    return cfg


def load_security(cfg):
    """(Users or None, Acl or None, allow_anonymous) from the device config
    (common/broker/security_files.py); ConfigError "FILE:LINE: reason"."""
    from common.broker.security_files import load_security as load

    users, acl = load(_read_text, cfg["password_file"], cfg["acl_file"])
    return users, acl, cfg["allow_anonymous"]


def load_jwt(opts, wall, where="device config"):
    """The core's JwtAuth of the device config's "jwt" object: its HMAC
    secret (secret_file, else secret) verifies HS256/384/512 with the
    port's hashlib; `wall`: () -> s since 1970 (firmware/board.wall)."""
    from common.broker.jwt_auth import JwtAuth, hmac_key

    narrow = opts.get("algorithms") or None
    if opts.get("secret_file") is not None:
        name = opts["secret_file"]
        secret = _read_bytes(name).rstrip()
    elif opts.get("secret") is not None:
        name = where + ": jwt secret"
        secret = opts["secret"].encode()
    else:
        raise ConfigError("%s: jwt: set secret_file (or secret): a board verifies HMAC tokens (HS256/384/512)" % where)
    return JwtAuth([hmac_key(secret, name, narrow)], wall, opts)


def _read_text(path, key):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ConfigError("%s: cannot read the %s (%s)" % (path, key, e))


def load_tls(cfg, path="device config"):
    """The listener's ssl.SSLContext from the device config, or None (no
    certfile); ConfigError naming the key and file for what mbedTLS refuses.
    `ssl` is imported only then: a board without TLS keeps it out of its heap."""
    if not cfg["certfile"]:
        for key in ("keyfile", "cafile"):
            if cfg[key]:
                raise ConfigError(
                    "%s: %s is set but certfile is not: TLS needs both certfile and keyfile" % (path, key)
                )
        if cfg["require_certificate"]:
            raise ConfigError("%s: require_certificate needs TLS: set certfile, keyfile and cafile" % path)
        return None
    if not cfg["keyfile"]:
        raise ConfigError("%s: certfile is set but keyfile is not: TLS needs the certificate's private key" % path)
    if cfg["require_certificate"] != bool(cfg["cafile"]):
        # Without require_certificate mbedTLS would let a client certificate
        # that does not verify through (CERT_OPTIONAL): no half measure.
        raise ConfigError(
            "%s: cafile and require_certificate go together (mutual TLS: client certificates signed by cafile)" % path
        )
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_cert_chain(ctx, cfg["certfile"], cfg["keyfile"])
    if cfg["cafile"]:
        load_ca(ctx, cfg["cafile"])
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def load_cert_chain(ctx, certfile, keyfile):
    """A DER certificate and its key into `ctx`; ConfigError naming the files."""
    try:
        ctx.load_cert_chain(_read_bytes(certfile), _read_bytes(keyfile))
    except ValueError as e:  # "invalid cert" / "invalid key"
        raise ConfigError(
            "certfile %s / keyfile %s: mbedTLS refused them (%s); give a DER certificate and its unencrypted DER"
            " key (tools/deploy --certfile CERT.pem --keyfile KEY.pem converts PEM files)"
            % (certfile, keyfile, e.args[0] if e.args else e)
        )


def load_ca(ctx, cafile):
    """The one DER CA certificate `ctx` verifies the peer against; ConfigError naming the file."""
    try:
        ctx.load_verify_locations(cadata=_read_bytes(cafile))
    except ValueError as e:
        raise ConfigError(
            "cafile %s: mbedTLS refused it (%s); give one DER CA certificate (tools/deploy --cafile converts PEM)"
            % (cafile, e.args[0] if e.args else e)
        )


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError("%s: cannot read (%s)" % (path, e))
