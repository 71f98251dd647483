"""The PPP uplink's settings: the device config's "ppp" object, checked.

    "ppp": {"uart": 0, "tx": 0, "rx": 1, "baudrate": 115200, "flow": "rtscts", "rts": 3, "cts": 2,
            "dial": [["AT", "OK", 2], ["ATE0", "OK", 2],
                     ["AT+CGDCONT=1,\\"IP\\",\\"internet\\"", "OK", 5], ["ATD*99#", "CONNECT", 30]],
            "security": "pap", "user": "web", "password": "web"}

`parse_ppp(where, obj)` checks every key with the core's validator
(common/broker/settings.py) and the dial-up script's steps ([command,
expected answer, timeout in s]; docs/boards.md, "PPP uplink"), and returns
a dict with every key (times in ms, the script as dialscript.py's steps);
ConfigError (one line: the file, the key, what to do) otherwise.
"""

from common.broker.settings import K_CHOICE, K_INT, K_NUMBER, K_STR, ConfigError, check, defaults

SECURITY = ("none", "pap", "chap")
PPP = (
    ("name", "ppp", K_STR, None, None),  # names it in the log and in $SYS/broker/uplink/<name>/
    ("uart", 0, K_INT, 0, 2),  # machine.UART id
    ("tx", None, K_INT, 0, 48),  # GPIO of the board's TX (to the modem's RXD); not set: the port's default
    ("rx", None, K_INT, 0, 48),  # GPIO of the board's RX (from the modem's TXD)
    ("baudrate", 115200, K_INT, 300, 4000000),
    ("flow", "none", K_CHOICE, ("none", "rtscts"), None),  # hardware flow control (modems want it above 115200)
    ("rts", None, K_INT, 0, 48),  # GPIO of RTS (to the modem's RTS); with flow rtscts, not set: the port's default
    ("cts", None, K_INT, 0, 48),  # GPIO of CTS (from the modem's CTS)
    ("security", "none", K_CHOICE, SECURITY, None),  # PPP authentication: none, pap or chap
    ("user", "", K_STR, None, None),  # PAP/CHAP user name (the operator's, often "" or the APN's)
    ("password", "", K_STR, None, None),  # PAP/CHAP password
    ("connect_timeout", 30, K_NUMBER, 1, None),  # s for PPP (LCP, authentication, IPCP) to give an address
    ("backoff_min", 1.0, K_NUMBER, 0.1, None),  # s before the first redial; doubles per failure
    ("backoff_max", 60.0, K_NUMBER, 0.1, None),  # s at most between dials (half of it random)
)
MAX_STEPS = 16


def parse_ppp(where, obj):
    """The uplink's settings from the device config's "ppp" object."""
    where = where + ": ppp"
    if not isinstance(obj, dict):
        raise ConfigError("%s: wants an object {...} (docs/boards.md, PPP uplink)" % where)
    data = {}
    for key in obj:
        if not key.startswith("_"):
            data[key] = obj[key]
    dial = data.pop("dial", [])
    cfg = defaults(PPP)
    cfg.update(check(where, data, PPP, "docs/boards.md"))
    if cfg["backoff_max"] < cfg["backoff_min"]:
        raise ConfigError("%s: backoff_max must not be below backoff_min." % where)
    if cfg["security"] != "none" and not cfg["user"]:
        raise ConfigError(
            '%s: security %r needs a user (and password); or set "security": "none".' % (where, cfg["security"])
        )
    if (cfg["rts"] is None) != (cfg["cts"] is None):
        raise ConfigError("%s: rts and cts go together (both pins, or neither for the port's default)." % where)
    cfg["dial"] = parse_dial(where, dial)
    cfg["connect_timeout_ms"] = int(cfg.pop("connect_timeout") * 1000)
    cfg["backoff_min_ms"] = int(cfg.pop("backoff_min") * 1000)
    cfg["backoff_max_ms"] = int(cfg.pop("backoff_max") * 1000)
    return cfg


def parse_dial(where, dial):
    """The dial-up script: a list of [command, expected answer, timeout s] -> steps."""
    how = (
        ' wants a list of [command, expected answer, timeout in s], e.g. [["AT", "OK", 2], ["ATD*99#", "CONNECT", 30]]'
    )
    if not isinstance(dial, list) or len(dial) > MAX_STEPS:
        raise ConfigError("%s: dial%s (at most %d steps)." % (where, how, MAX_STEPS))
    steps = []
    for i, step in enumerate(dial):
        ok = isinstance(step, list) and len(step) == 3
        if ok:
            send, expect, timeout = step
            ok = (
                isinstance(send, str)
                and isinstance(expect, str)
                and isinstance(timeout, (int, float))
                and not isinstance(timeout, bool)
                and 0 < timeout <= 600
                and (send or expect)
                and "\r" not in send
                and "\n" not in send
            )
        if not ok:
            raise ConfigError(
                "%s: dial step %d = %r:%s (timeout 0..600 s; a command without line ends)" % (where, i + 1, step, how)
            )
        steps.append((send, expect.encode(), int(timeout * 1000)))
    return tuple(steps)
