"""The schema of a bridge's settings and the one parser both shells use.

The host's TOML has `[[bridge]]` tables with `[[bridge.topic]]` rules
(boards/linux.toml documents each key); a board's JSON would carry the same
objects under "bridge". `parse_bridges(where, tables)` checks them with the
core's validator (common/broker/settings.py), the rules (rules.py) and what
the profile needs (profiles.py), and returns one BridgeSettings each;
ConfigError (one line: the table, the key, what to do) otherwise.
"""

from common.bridge.profiles import AZURE_TIER_NAMES, PROFILES, profile_named
from common.bridge.rules import BOTH, HASH, IN, OUT, Rule, placeholder
from common.broker.settings import K_BOOL, K_CHOICE, K_INT, K_LIST, K_NUMBER, K_STR, ConfigError, check, defaults
from common.broker.topics import validate_topic_filter, validate_topic_name

# [[bridge]]: one upstream. Times are seconds.
BRIDGE = (
    ("name", "", K_STR, None, None),  # names it in the log and in $SYS/broker/bridge/<name>/ (required)
    ("addresses", [], K_LIST, None, None),  # ["host:port", ...] tried in order (failover; required)
    ("client_id", "", K_STR, None, None),  # upstream client id ("" = "siskin-<name>"; azure: the device id)
    ("username", None, K_STR, None, None),  # upstream user name (not set: none)
    ("password", None, K_STR, None, None),  # upstream password (not set: none)
    ("tls", False, K_BOOL, None, None),  # TLS to the upstream (on by itself when cafile is set)
    ("cafile", "", K_STR, None, None),  # PEM (boards: DER, required): the upstream's CA ("" = the system's)
    ("certfile", "", K_STR, None, None),  # PEM (boards: DER): our client certificate (mutual TLS)
    ("keyfile", "", K_STR, None, None),  # PEM (boards: DER): its private key
    ("alpn", [], K_LIST, None, None),  # TLS ALPN protocols (aws on port 443: x-amzn-mqtt-ca by itself)
    ("protocol", 4, K_INT, 4, 5),  # MQTT level to the upstream: 4 (3.1.1) or 5
    (
        "bridge_bit",
        True,
        K_BOOL,
        None,
        None,
    ),  # 3.1.1: protocol level | 0x80, so the upstream sends nothing back (Mosquitto)
    ("keepalive", 60, K_INT, 1, 65535),  # s; also: an answer owed this long and the upstream is taken for dead
    ("stall_timeout", 5.0, K_NUMBER, 0.1, None),  # s an ack / PINGRESP may be overdue before "stalled"
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
    ),  # mqtt | nats | aws | azure | hosted: what the upstream takes (docs/bridge.md, "Profiles")
    ("max_inflight", 20, K_INT, 1, 65535),  # messages sent up and not yet acknowledged
    ("window", 32, K_INT, 1, 65535),  # messages this broker hands the bridge before their ack (the rest stay queued)
    ("publish_rate", -1, K_INT, -1, None),  # publishes/s up at most (pacing); -1 = the profile's (aws: 90; azure: by tier), 0 = none
    ("bytes_rate", -1, K_INT, -1, None),  # topic + payload bytes/s up at most; -1 = the profile's (aws: 471859), 0 = none
    ("local_client_id", "", K_STR, None, None),  # the local session's client id ("" = "siskin-bridge-<name>")
    ("backoff_min", 1.0, K_NUMBER, 0.1, None),  # s before the first retry; doubles per failure
    ("backoff_max", 10.0, K_NUMBER, 0.1, None),  # s at most between attempts (half of it random)
    ("connect_timeout", 10.0, K_NUMBER, 0.1, None),  # s for TCP, TLS and CONNACK together
    ("hub", "", K_STR, None, None),  # azure: the IoT Hub's host name ("" = the address's host)
    ("device_key", "", K_STR, None, None),  # azure: the device's key (base64): SAS tokens are made of it
    ("sas_ttl", 3600, K_INT, 60, None),  # azure: s a SAS token lasts (renewed at 4/5 of it)
    # azure: the hub's tier and units; the pace defaults to 90 % of its
    # device-to-cloud throttle (free, b1, s1: 12/s a unit, at least 100/s;
    # b2, s2: 120/s a unit; b3, s3: 6,000/s a unit)
    ("azure_tier", "s1", K_CHOICE, AZURE_TIER_NAMES, None),
    ("azure_units", 1, K_INT, 1, None),
    # Sparkplug: the primary host application's id upstream ("" = off): while
    # its spBv1.0/STATE/<id> there is not online, nothing goes up (docs/sparkplug.md)
    ("sparkplug_host", "", K_STR, None, None),
    # Mosquitto's notifications: the link's state, retained "1" connected /
    # "0" not (a will upstream says "0" when the link is cut), here and upstream
    ("notifications", False, K_BOOL, None, None),
    ("notification_topic", "", K_STR, None, None),  # "" = $SYS/broker/connection/<client_id>/state
    ("notifications_local_only", False, K_BOOL, None, None),  # true: here only, not upstream
    # Sparkplug: births first -- the NBIRTH and DBIRTHs that went up, at most
    # this many kept, are sent again before anything else whenever sending
    # starts on an upstream connection (0 = off; docs/sparkplug.md)
    ("sparkplug_births", 0, K_INT, 0, 65535),
)
DIRECTION_NAMES = ("out", "in", "both")
# [[bridge.topic]]: one rule. Either `local` and `remote` (rules.py: a filter
# on the side messages come from, a template with {n} on the other), or
# the prefix form: here `local_prefix + pattern`, upstream `remote_prefix + pattern`.
TOPIC = (
    ("pattern", "#", K_STR, None, None),  # a topic filter below the prefixes
    ("direction", "out", K_CHOICE, DIRECTION_NAMES, None),  # out: here -> upstream; in: upstream -> here; both
    ("local_prefix", "", K_STR, None, None),  # e.g. "sensors/" (no wildcards)
    ("remote_prefix", "", K_STR, None, None),  # e.g. "edge-1/sensors/" (no wildcards)
    ("local", "", K_STR, None, None),  # here: "sensors/+/temp" (out: a filter; in: a template, "dev/{1}")
    ("remote", "", K_STR, None, None),  # upstream: "site1/{1}/temperature" (out: a template; in: a filter)
    ("qos", 1, K_INT, 0, 2),  # the QoS cap both ways (nats, aws, azure: at most 1)
    ("retain", True, K_BOOL, None, None),  # false: the retain flag is cleared on the way
)


class BridgeSettings:
    """The checked values of one [[bridge]] table, as attributes; `topics` the
    rule dicts (each with "local" and "remote" filled in)."""

    def __init__(self, values, topics):
        for name, value in defaults(BRIDGE).items():
            setattr(self, name, values.get(name, value))
        self.topics = topics

    def same_as(self, other):
        """Whether `other` (a BridgeSettings) describes the same bridge (a reload
        leaves this one running)."""
        for e in BRIDGE:
            if getattr(self, e[0]) != getattr(other, e[0]):
                return False
        return _rules_key(self.topics) == _rules_key(other.topics)


def _rules_key(topics):
    return [(r["direction"], r["local"], r["remote"], r["qos"], r["retain"]) for r in topics]


def parse_bridges(where, tables):
    """[BridgeSettings] from a list of tables; ConfigError for a mistake."""
    if not isinstance(tables, list):
        raise ConfigError("%s: bridge must be tables ([[bridge]], one per upstream)." % where)
    out = []
    names = []
    for n, body in enumerate(tables, 1):
        at = "%s: [[bridge]] #%d" % (where, n)
        b = parse_bridge(at, body)
        if b.name in names:
            raise ConfigError("%s: a bridge named %r exists already; give each its own name." % (at, b.name))
        names.append(b.name)
        out.append(b)
    return out


def parse_bridge(at, body):
    """One BridgeSettings from one table (`at` names it in messages)."""
    if not isinstance(body, dict):
        raise ConfigError("%s: must be a table ([[bridge]] with keys under it)." % at)
    rules = body.get("topic", [])
    values = check(at, {k: v for k, v in body.items() if k != "topic"}, BRIDGE)
    b = BridgeSettings(values, [])
    if not b.name or "/" in b.name or "+" in b.name or "#" in b.name:
        raise ConfigError('%s: name is missing or has "/", "+" or "#"; add e.g. name = "cloud".' % at)
    if not b.addresses:
        raise ConfigError('%s: addresses is missing; add e.g. addresses = ["broker.example.com:1883"].' % at)
    for a in b.addresses:
        host, _, port = a.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError('%s: address %r wants "host:port".' % (at, a))
    if bool(b.certfile) != bool(b.keyfile):
        raise ConfigError("%s: certfile and keyfile go together (the client certificate and its key)." % at)
    if b.notification_topic and validate_topic_name(b.notification_topic):
        raise ConfigError("%s: notification_topic %r is not a topic name (no wildcards)." % (at, b.notification_topic))
    if b.backoff_max < b.backoff_min:
        raise ConfigError("%s: backoff_max must not be below backoff_min." % at)
    profile = profile_named(b.profile)
    _check_profile(at, b, profile)
    if not isinstance(rules, list) or not rules:
        raise ConfigError('%s: no topic rules; add [[bridge.topic]] tables (pattern = "#", direction = "out").' % at)
    for i, rule in enumerate(rules, 1):
        b.topics.append(_parse_rule("%s [[bridge.topic]] #%d" % (at, i), rule, b, profile))
    level = profile.level or b.protocol
    if level == 4 and not (b.bridge_bit and profile.bridge_bit):
        _no_echo(at, b)
    if b.notifications and not b.notifications_local_only:
        _notifications_up(at, b, profile)
    return b


def _notifications_up(at, b, profile):
    """The upstream must take the notifications' retained messages and will (notify.py)."""
    from common.bridge.notify import topic_of

    why = "%s keeps no retained messages" % b.profile if not profile.retain else None
    why = why or profile.refusal(topic_of(b), b"1", None)
    if why:
        raise ConfigError(
            "%s: notifications upstream: %s; set notification_topic to one it takes, or notifications_local_only = true."
            % (at, why)
        )


def _check_profile(at, b, profile):
    """What profile `profile` needs of the [[bridge]] keys."""
    name = b.profile
    if profile.level and b.protocol != profile.level:
        raise ConfigError("%s: profile %s speaks MQTT 3.1.1 only; set protocol = 4." % (at, name))
    if profile.tls:
        b.tls = True
    if profile.certificate and not b.certfile:
        raise ConfigError(
            "%s: profile %s authenticates with an X.509 client certificate: set certfile and keyfile." % (at, name)
        )
    if profile.user and (not b.username or b.password is None):
        raise ConfigError("%s: profile %s signs in with a user name and password: set both." % (at, name))
    if name == "aws" and not b.alpn:
        for a in b.addresses:
            if a.endswith(":443"):
                # AWS IoT takes MQTT with a client certificate on port 443
                # only with this ALPN protocol.
                b.alpn = ["x-amzn-mqtt-ca"]
    if name == "azure":
        if not b.client_id:
            raise ConfigError("%s: profile azure: client_id is the device id; set it." % at)
        if not (b.device_key or b.password or b.certfile):
            raise ConfigError(
                "%s: profile azure needs device_key (SAS tokens are made of it), a SAS token as password, "
                "or certfile and keyfile (X.509)." % at
            )
        if b.device_key:
            try:
                from common.crypto.auth_scram import unb64

                unb64(b.device_key)
            except Exception:  # (binascii.Error; the wasm port's pure-Python binascii raises Exception)
                raise ConfigError("%s: device_key is not base64 (copy the device's primary key)." % at) from None


def _parse_rule(at, rule, b, profile):
    if not isinstance(rule, dict):
        raise ConfigError("%s: must be a table." % at)
    r = defaults(TOPIC)
    r.update(check(at, rule, TOPIC))
    if r["local"] or r["remote"]:
        if not (r["local"] and r["remote"]):
            raise ConfigError("%s: local and remote go together (the topic here and upstream)." % at)
        for key in ("pattern", "local_prefix", "remote_prefix"):
            if key in rule:
                raise ConfigError("%s: %s belongs to the prefix form; with local and remote, leave it out." % (at, key))
    else:
        for key in ("local_prefix", "remote_prefix"):
            if "+" in r[key] or "#" in r[key]:
                raise ConfigError("%s: %s may not hold wildcards." % (at, key))
        r["local"] = r["local_prefix"] + r["pattern"]
        r["remote"] = r["remote_prefix"] + r["pattern"]
    made = Rule(r["direction"], r["local"], r["remote"], r["qos"], r["retain"])
    why = check_rule(made)
    if why is not None:
        raise ConfigError("%s: %s." % (at, why))
    remote = r["remote"]
    if profile.bad_chars:
        for c in profile.bad_chars:
            if c in remote:
                # NATS refuses such a filter (SUBACK 0x80) and closes the
                # connection for such a topic (docs/nats.md).
                raise ConfigError("%s: %s takes no %r in a topic: %r." % (at, b.profile, c, remote))
    if b.profile == "azure":
        _azure_rule(at, made, b.client_id)
    if r["qos"] > profile.max_qos:
        r["qos"] = profile.max_qos  # (QoS 2 downgraded: the upstream takes at most this)
    return r


def _azure_rule(at, rule, device):
    """IoT Hub takes a device's messages on one topic and sends it commands on another."""
    events = "devices/%s/messages/events/" % device
    bound = "devices/%s/messages/devicebound/#" % device
    if rule.direction & OUT and not (rule.remote.startswith(events) or rule.remote.startswith("$iothub/")):
        raise ConfigError('%s: IoT Hub takes messages on %r (and "$iothub/..."): remote = "%s".' % (at, events, events))
    if rule.direction & IN and not (rule.remote == bound or rule.remote.startswith("$iothub/")):
        raise ConfigError('%s: IoT Hub sends on %r: remote = "%s" for an "in" rule.' % (at, bound, bound))


def _no_echo(at, b):
    """An upstream without No Local (3.1.1 without the bridge bit: NATS, or a
    bridge_bit = false) sends the bridge its own messages back: a message it
    sends up to a topic one of its "in" filters matches comes straight back
    down. Such rules are refused; separate remote topics for "out" and "in"
    never echo (docs/bridge.md)."""
    rules = [Rule(r["direction"], r["local"], r["remote"]) for r in b.topics]
    for i, a in enumerate(rules, 1):
        if not a.direction & OUT:
            continue
        image = remote_image(a)
        for j, c in enumerate(rules, 1):
            if not c.direction & IN:
                continue
            if overlap(image, c.remote):
                what = (
                    'rule #%d is "both" (%r)' % (i, c.remote)
                    if i == j
                    else "the remote topics of rule #%d (%s, %r) and rule #%d (%s, %r) overlap"
                    % (i, DIRECTION_NAMES[a.direction - 1], image, j, DIRECTION_NAMES[c.direction - 1], c.remote)
                )
                raise ConfigError(
                    "%s: %s: this upstream has no No Local (%s), so what the bridge sends up would come back down; "
                    'give "out" and "in" rules separate remote topics.'
                    % (at, what, "profile " + b.profile if b.profile != "mqtt" else "bridge_bit = false")
                )


def check_rule(rule):
    """Why `rule` (a Rule) cannot be used, None when it can (rules.py's theory)."""
    d = rule.direction
    why = None
    if d & OUT:
        why = _check_side(rule.local, rule.remote, d == BOTH)
    if why is None and d & IN:
        why = _check_side(rule.remote, rule.local, d == BOTH)
    return why


def _wildcards(levels):
    """The wildcards of a filter's levels, in order ("+" / "#")."""
    return [lv for lv in levels if lv == "+" or lv == HASH]


def _check_side(flt, tpl, both):
    """The side messages come from (`flt`) and the one they go to (`tpl`)."""
    if validate_topic_filter(flt):
        return "%r is not a valid topic filter" % flt
    caps = _wildcards(flt.split("/"))
    tpl_levels = tpl.split("/")
    if validate_topic_filter(tpl) == 0 and _wildcards(tpl_levels):
        # A filter on the other side too: its wildcards in order.
        if _wildcards(tpl_levels) != caps:
            return "%r and %r do not have the same wildcards in the same order; use {n} to place what %r matched" % (
                flt,
                tpl,
                flt,
            )
        return None
    if both:
        return 'a "both" rule maps each way: both sides are filters with the same wildcards (%r, %r)' % (flt, tpl)
    probe = []
    for lv in tpl_levels:
        n = placeholder(lv)
        if n:
            if n > len(caps):
                return "%r names {%d} but %r has %d wildcard(s)" % (tpl, n, flt, len(caps))
            probe.append("x")
            continue
        if "{" in lv:
            for i in range(len(caps)):
                if caps[i] == HASH and "{%d}" % (i + 1) in lv:
                    return "{%d} (the levels a '#' matched) must be a whole level in %r" % (i + 1, tpl)
                lv = lv.replace("{%d}" % (i + 1), "x")
            if "{" in lv or "}" in lv:
                return "%r: a placeholder is {n}, n from 1 to %d" % (tpl, len(caps))
        probe.append(lv)
    if validate_topic_name("/".join(probe)):
        return "%r does not make a valid topic name (no + or # on this side: {n})" % tpl
    return None


def remote_image(rule):
    """A filter for every topic an "out" rule can send up (the loop check)."""
    out = []
    local_caps = _wildcards(rule.local_levels)
    for lv in rule.remote_levels:
        if lv == "+" or lv == HASH:
            out.append(lv)
            if lv == HASH:
                break
            continue
        n = placeholder(lv)
        if n and local_caps[n - 1] == HASH:
            out.append(HASH)
            break
        out.append("+" if "{" in lv else lv)
    return "/".join(out)


def overlap(a, b):
    """Whether some topic matches both filters `a` and `b`."""
    x = a.split("/")
    y = b.split("/")
    n = min(len(x), len(y))
    for k in range(n):
        p = x[k]
        q = y[k]
        if p == HASH or q == HASH:
            return True
        if p != q and p != "+" and q != "+":
            return False
    if len(x) == len(y):
        return True
    longer = x if len(x) > len(y) else y
    return len(longer) == n + 1 and longer[n] == HASH  # "a/#" matches "a"
