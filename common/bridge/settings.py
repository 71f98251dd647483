"""The schema of a bridge's settings and the one parser both shells use.

The host's TOML has `[[bridge]]` tables with `[[bridge.topic]]` rules
(boards/linux.toml documents each key); a board's JSON would carry the same
objects under "bridge". `parse_bridges(where, tables)` checks them with the
core's validator (common/broker/settings.py) and returns one BridgeSettings
each; ConfigError (one line: the table, the key, what to do) otherwise.
"""

from common.broker.settings import K_BOOL, K_CHOICE, K_INT, K_LIST, K_NUMBER, K_STR, ConfigError, check, defaults
from common.broker.topics import validate_topic_filter

PROFILES = ("mqtt", "nats")

# [[bridge]]: one upstream. Times are seconds.
BRIDGE = (
    ("name", "", K_STR, None, None),  # names it in the log and in $SYS/broker/bridge/<name>/ (required)
    ("addresses", [], K_LIST, None, None),  # ["host:port", ...] tried in order (failover; required)
    ("client_id", "", K_STR, None, None),  # upstream client id ("" = "siskin-<name>")
    ("username", None, K_STR, None, None),  # upstream user name (not set: none)
    ("password", None, K_STR, None, None),  # upstream password (not set: none)
    ("tls", False, K_BOOL, None, None),  # TLS to the upstream (on by itself when cafile is set)
    ("cafile", "", K_STR, None, None),  # PEM (boards: DER, required): the upstream's CA ("" = the system's)
    ("certfile", "", K_STR, None, None),  # PEM (boards: DER): our client certificate (mutual TLS)
    ("keyfile", "", K_STR, None, None),  # PEM (boards: DER): its private key
    ("protocol", 4, K_INT, 4, 5),  # MQTT level to the upstream: 4 (3.1.1) or 5
    (
        "bridge_bit",
        True,
        K_BOOL,
        None,
        None,
    ),  # 3.1.1: protocol level | 0x80, so the upstream sends nothing back (Mosquitto)
    ("keepalive", 60, K_INT, 1, 65535),  # s; the upstream is taken for dead after twice this without a byte
    (
        "clean_session",
        False,
        K_BOOL,
        None,
        None,
    ),  # false: the upstream keeps our session (and "in" messages) while away
    (
        "profile",
        "mqtt",
        K_CHOICE,
        PROFILES,
        None,
    ),  # "nats": 3.1.1, QoS <= 1, "." / " " topics dead-lettered, out and in rules apart upstream
    ("max_inflight", 20, K_INT, 1, 65535),  # messages sent up and not yet acknowledged
    ("window", 32, K_INT, 1, 65535),  # messages this broker hands the bridge before their ack (the rest stay queued)
    ("local_client_id", "", K_STR, None, None),  # the local session's client id ("" = "siskin-bridge-<name>")
    ("backoff_min", 1.0, K_NUMBER, 0.1, None),  # s before the first retry; doubles per failure
    ("backoff_max", 60.0, K_NUMBER, 0.1, None),  # s at most between attempts (half of it random)
    ("connect_timeout", 10.0, K_NUMBER, 0.1, None),  # s for TCP, TLS and CONNACK together
)
DIRECTION_NAMES = ("out", "in", "both")
# [[bridge.topic]]: one rule. Here `local_prefix + pattern`, upstream `remote_prefix + pattern`.
TOPIC = (
    ("pattern", "#", K_STR, None, None),  # a topic filter below the prefixes
    ("direction", "out", K_CHOICE, DIRECTION_NAMES, None),  # out: here -> upstream; in: upstream -> here; both
    ("local_prefix", "", K_STR, None, None),  # e.g. "sensors/" (no wildcards)
    ("remote_prefix", "", K_STR, None, None),  # e.g. "edge-1/sensors/" (no wildcards)
    ("qos", 1, K_INT, 0, 2),  # the QoS cap both ways (NATS: at most 1)
    ("retain", True, K_BOOL, None, None),  # false: the retain flag is cleared on the way
)


class BridgeSettings:
    """The checked values of one [[bridge]] table, as attributes; `topics` the rule dicts."""

    def __init__(self, values, topics):
        for name, value in defaults(BRIDGE).items():
            setattr(self, name, values.get(name, value))
        self.topics = topics


def parse_bridges(where, tables):
    """[BridgeSettings] from a list of tables; ConfigError for a mistake."""
    if not isinstance(tables, list):
        raise ConfigError("%s: bridge must be tables ([[bridge]], one per upstream)." % where)
    out = []
    names = []
    for n, body in enumerate(tables, 1):
        at = "%s: [[bridge]] #%d" % (where, n)
        if not isinstance(body, dict):
            raise ConfigError("%s: must be a table ([[bridge]] with keys under it)." % at)
        rules = body.get("topic", [])
        values = check(at, {k: v for k, v in body.items() if k != "topic"}, BRIDGE)
        b = BridgeSettings(values, [])
        if not b.name or "/" in b.name or "+" in b.name or "#" in b.name:
            raise ConfigError('%s: name is missing or has "/", "+" or "#"; add e.g. name = "cloud".' % at)
        if b.name in names:
            raise ConfigError("%s: a bridge named %r exists already; give each its own name." % (at, b.name))
        names.append(b.name)
        if not b.addresses:
            raise ConfigError('%s: addresses is missing; add e.g. addresses = ["broker.example.com:1883"].' % at)
        for a in b.addresses:
            host, _, port = a.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError('%s: address %r wants "host:port".' % (at, a))
        if b.profile == "nats" and b.protocol != 4:
            raise ConfigError("%s: profile nats speaks MQTT 3.1.1 only; set protocol = 4." % at)
        if bool(b.certfile) != bool(b.keyfile):
            raise ConfigError("%s: certfile and keyfile go together (the client certificate and its key)." % at)
        if b.backoff_max < b.backoff_min:
            raise ConfigError("%s: backoff_max must not be below backoff_min." % at)
        if not isinstance(rules, list) or not rules:
            raise ConfigError(
                '%s: no topic rules; add [[bridge.topic]] tables (pattern = "#", direction = "out").' % at
            )
        for i, rule in enumerate(rules, 1):
            rat = "%s [[bridge.topic]] #%d" % (at, i)
            if not isinstance(rule, dict):
                raise ConfigError("%s: must be a table." % rat)
            r = defaults(TOPIC)
            r.update(check(rat, rule, TOPIC))
            if validate_topic_filter(r["local_prefix"] + r["pattern"]) or validate_topic_filter(
                r["remote_prefix"] + r["pattern"]
            ):
                raise ConfigError("%s: pattern %r with its prefixes is not a valid topic filter." % (rat, r["pattern"]))
            for key in ("local_prefix", "remote_prefix"):
                if "+" in r[key] or "#" in r[key]:
                    raise ConfigError("%s: %s may not hold wildcards." % (rat, key))
            remote = r["remote_prefix"] + r["pattern"]
            if b.profile == "nats" and ("." in remote or " " in remote):
                # NATS refuses such a filter (SUBACK 0x80) and closes the
                # connection for such a topic (docs/nats.md).
                raise ConfigError('%s: NATS takes no "." or space in a topic: %r.' % (rat, remote))
            if b.profile == "nats" and r["qos"] > 1:
                r["qos"] = 1  # NATS takes QoS 0 and 1: QoS 2 is downgraded
            b.topics.append(r)
        if b.profile == "nats":
            _no_echo(at, b.topics)
        out.append(b)
    return out


def _no_echo(at, rules):
    """NATS (3.1.1 only, no bridge bit) has no No Local: a message the bridge
    sends up to a topic one of its own "in" filters matches comes straight
    back down. Such rules are refused; separate remote prefixes for "out"
    and "in" never echo (docs/bridge.md)."""
    for i, a in enumerate(rules, 1):
        if a["direction"] == "in":
            continue
        for j, b in enumerate(rules, 1):
            if b["direction"] == "out":
                continue
            fa = a["remote_prefix"] + a["pattern"]
            fb = b["remote_prefix"] + b["pattern"]
            if _overlap(fa, fb):
                what = (
                    'rule #%d is "both" (%r)' % (i, fa)
                    if i == j
                    else "the remote filters of rule #%d (%s, %r) and rule #%d (%s, %r) overlap"
                    % (i, a["direction"], fa, j, b["direction"], fb)
                )
                raise ConfigError(
                    "%s: %s: NATS has no No Local, so what the bridge sends up would come back down; "
                    'give "out" and "in" rules separate remote prefixes.' % (at, what)
                )


def _overlap(a, b):
    """Whether some topic matches both filters `a` and `b`."""
    x = a.split("/")
    y = b.split("/")
    n = min(len(x), len(y))
    for k in range(n):
        p = x[k]
        q = y[k]
        if p == "#" or q == "#":
            return True
        if p != q and p != "+" and q != "+":
            return False
    if len(x) == len(y):
        return True
    longer = x if len(x) > len(y) else y
    return len(longer) == n + 1 and longer[n] == "#"  # "a/#" matches "a"


def make_bridge(b, log, entropy):
    """The Bridge (bridge.py) a BridgeSettings describes."""
    from common.bridge.bridge import Bridge, Rule

    rules = [
        Rule(r["direction"], r["pattern"], r["local_prefix"], r["remote_prefix"], r["qos"], r["retain"])
        for r in b.topics
    ]
    return Bridge(
        b.name,
        b.addresses,
        rules,
        log,
        entropy,
        client_id=b.client_id,
        username=b.username,
        password=b.password,
        level=b.protocol,
        keep_alive=b.keepalive,
        clean_session=b.clean_session,
        profile=b.profile,
        bridge_bit=b.bridge_bit,
        max_inflight=b.max_inflight,
        window=b.window,
        local_client_id=b.local_client_id,
        backoff_min_ms=int(b.backoff_min * 1000),
        backoff_max_ms=int(b.backoff_max * 1000),
        connect_timeout_ms=int(b.connect_timeout * 1000),
    )
