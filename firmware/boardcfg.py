# Board settings and the device config, read from JSON (MicroPython has json,
# not tomllib).
#
# A board file (boards/esp32.json, boards/rp2040_picow.json) is
#
#   {"limits": {...}, "server": {...}}
#
# "limits" overrides common/settings.py FIELDS by name (an unknown name or a
# wrong type is an error: Settings.update raises ValueError); "server" holds
# the shell's own knobs (SERVER_KEYS below). Keys starting with "_" are
# comments (JSON has none) and ignored, at any level of these files.
#
# The device config (/siskin.json on the board) says which board file to
# use and holds what differs per device: Wi-Fi, port, log level, storage key
# file; it may also carry "limits" and "server" objects that override the
# board file's. docs/boards.md lists every key.

import json

from common.settings import Settings

# The shell's knobs: name -> default. Sizes in bytes, times in seconds.
SERVER_KEYS = {
    # Sockets the shell may hold open at once, the listener included. Keep it
    # at or below the lwIP limit of the firmware (docs/boards.md): accepting
    # beyond it would fail inside lwIP instead of being refused by us.
    "max_sockets": 10,
    # Bytes read from a socket at once into the connection slot's buffer.
    "read_buffer": 1024,
    # listen() backlog.
    "backlog": 2,
    # s a closing connection is drained (input read and discarded) so the
    # last CONNACK/DISCONNECT is not destroyed by a reset.
    "close_linger": 2,
    # s to wait for the connections to close at a graceful stop.
    "shutdown_timeout": 3,
    # s between "heap free=... alloc=..." lines on stdout, 0 = never.
    "heap_report": 0,
}

# The device config: name -> default.
DEVICE_KEYS = {
    "board": "esp32",  # boards/<name>.json, or a path ending in .json
    "host": "0.0.0.0",
    "port": 1883,
    "log_level": "info",  # debug | info | warning | error
    "wifi_ssid": "",  # empty: no station mode, straight to the access point
    "wifi_password": "",
    "wifi_attempts": 6,  # station attempts (backoff 1, 2, 4 ... 32 s) before the AP
    "wifi_timeout": 15,  # s one attempt may take
    "hostname": "siskin",
    "ap_ssid": "siskin-setup",  # the provisioning access point
    "ap_password": "",  # 8+ characters for WPA2, empty = open
    # The store: a littlefs path, "partition:NAME" (raw flash) or "none"
    # (firmware/storage.py).
    "storage": "/siskin.store",
    "storage_key_file": "/siskin.key",  # AES key (hex); absent file = store not encrypted
    "watchdog_ms": 8000,  # machine.WDT timeout, 0 = no watchdog
    "limits": {},  # overrides of the board file's limits
    "server": {},  # overrides of the board file's server knobs
}

LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class ConfigError(Exception):
    pass


def read_json(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigError("%s: cannot read (%s)" % (path, e))
    except ValueError as e:
        raise ConfigError("%s: not valid JSON (%s)" % (path, e))
    if not isinstance(data, dict):
        raise ConfigError("%s: must hold a JSON object" % path)
    return data


def _strip_comments(obj):
    out = {}
    for key in obj:
        if not key.startswith("_"):
            out[key] = obj[key]
    return out


def _check_keys(where, obj, known):
    for key in obj:
        if key not in known:
            raise ConfigError("%s: unknown key %r" % (where, key))
        default = known[key]
        value = obj[key]
        if isinstance(default, bool):
            ok = value is True or value is False
        elif isinstance(default, int):
            ok = isinstance(value, (int, float)) and value is not True and value is not False and value >= 0
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ConfigError("%s: %r has the wrong type (%r)" % (where, key, value))


def server_options(overrides, where="server"):
    obj = _strip_comments(overrides)
    _check_keys(where, obj, SERVER_KEYS)
    opts = dict(SERVER_KEYS)
    opts.update(obj)
    if opts["max_sockets"] < 2:
        raise ConfigError("%s: max_sockets must be at least 2 (the listener and one client)" % where)
    if opts["read_buffer"] < 64:
        raise ConfigError("%s: read_buffer must be at least 64 bytes" % where)
    return opts


def load_board(path, limits=None, server=None):
    """(Settings, server options) from a board file plus optional overrides."""
    data = _strip_comments(read_json(path))
    for key in data:
        if key not in ("limits", "server"):
            raise ConfigError("%s: unknown key %r (expected limits, server)" % (path, key))
    merged = _strip_comments(data.get("limits", {}))
    if limits:
        merged.update(_strip_comments(limits))
    try:
        settings = Settings(merged)
    except ValueError as e:
        raise ConfigError("%s: %s" % (path, e))
    srv = _strip_comments(data.get("server", {}))
    if server:
        srv.update(_strip_comments(server))
    opts = server_options(srv, path + " server")
    if settings.max_connections >= opts["max_sockets"] - 1:
        # One slot at least must be left to answer CONNACK 0x03/0x97 to the
        # client after the last; without it a full broker could only close.
        raise ConfigError(
            "%s: max_connections (%d) must be below max_sockets - 1 (%d): one socket is the listener"
            " and one at least answers refusals" % (path, settings.max_connections, opts["max_sockets"] - 1)
        )
    return settings, opts


def board_path(root, board):
    if board.endswith(".json"):
        return board
    return "%s/boards/%s.json" % (root, board) if root else "boards/%s.json" % board


def load_device(path):
    """The device config as a dict with every key (defaults filled in)."""
    data = _strip_comments(read_json(path))
    _check_keys(path, data, DEVICE_KEYS)
    cfg = dict(DEVICE_KEYS)
    cfg.update(data)
    cfg["limits"] = dict(cfg["limits"])  # never the shared defaults
    cfg["server"] = dict(cfg["server"])
    if cfg["log_level"] not in LOG_LEVELS:
        raise ConfigError("%s: log_level must be one of debug, info, warning, error" % path)
    if cfg["port"] > 65535:
        raise ConfigError("%s: port must be 0..65535" % path)
    return cfg
