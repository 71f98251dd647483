"""A bridge's topic rules: which topics cross, and what they are called on the other side.

Theory of operation
-------------------
A rule has a direction ("out": here -> upstream, "in": upstream -> here,
"both"), a QoS cap, a retain switch and two sides, `local` and `remote`.
The side a message comes from is a topic filter (subscribed there); the
side it goes to is a template: its levels are literal, or hold `{n}`, the
text the n-th wildcard of the filter matched (a `#` stands for all the
levels it matched, possibly none):

    out  local "sensors/+/temp"   remote "site1/{1}/temperature"
         sensors/k1/temp   ->  site1/k1/temperature
    out  local "sensors/#"        remote "site1/all"          (many to one)
    in   remote "cmd/edge1/#"     local "cmd/{1}"

A template side that is itself a filter ("edge1/#") takes the wildcards in
order: its k-th wildcard is `{k}`. That is how the prefix form of a rule
(`pattern` below `local_prefix` / `remote_prefix`) maps: both sides are
prefix + pattern. A "both" rule must map each way: both sides are filters
with the same wildcards in the same order.

A `{n}` of a `#` is a whole level; when the `#` matched no level ("a/#"
matches "a") that level goes, with its separator. settings.py checks a
rule before it is made (check_rule); this module only maps.
"""

from common.compat import const

OUT = const(1)
IN = const(2)
BOTH = const(3)
DIRECTIONS = {"out": OUT, "in": IN, "both": BOTH}

HASH = "#"


def _levels(text):
    return text.split("/")


def placeholder(level):
    """n of a level that is exactly "{n}", else 0."""
    if len(level) > 2 and level[0] == "{" and level[-1] == "}" and level[1:-1].isdigit():
        return int(level[1:-1])
    return 0


def capture(levels, topic):
    """What the wildcards of filter `levels` matched in `topic` (a list of
    strings, a `#`'s joined with "/"), or None when it does not match."""
    if topic[:1] == "$" and (levels[0] == "+" or levels[0] == HASH):
        return None  # [MQTT-4.7.2-1]
    parts = topic.split("/")
    caps = []
    n = len(parts)
    for i in range(len(levels)):
        f = levels[i]
        if f == HASH:
            caps.append("/".join(parts[i:]))
            return caps
        if i >= n:
            return None
        if f == "+":
            caps.append(parts[i])
        elif f != parts[i]:
            return None
    return caps if n == len(levels) else None


class Rule:
    """One topic rule (see the module's theory of operation)."""

    __slots__ = ("direction", "hash_last", "local", "local_levels", "qos", "remote", "remote_levels", "retain")

    def __init__(self, direction, local, remote, qos=1, retain=True):
        self.direction = DIRECTIONS[direction] if isinstance(direction, str) else direction
        self.local = local  # the filter here (out, both) or the template (in)
        self.remote = remote  # the filter upstream (in, both) or the template (out)
        self.qos = qos  # the QoS cap, both ways
        self.retain = retain  # False: the retain flag is cleared on the way
        self.local_levels = _levels(local)
        self.remote_levels = _levels(remote)
        src = self.local_levels if self.direction & OUT else self.remote_levels
        self.hash_last = src[-1] == HASH  # (both sides of a "both" rule have the same wildcards)

    # ------------------------------------------------------------- mapping

    def out_topic(self, topic):
        """The upstream topic of local `topic`, None when the rule does not send it up."""
        if not self.direction & OUT:
            return None
        caps = capture(self.local_levels, topic)
        if caps is None:
            return None
        return _map(self.remote_levels, caps, self.hash_last)

    def in_topic(self, topic):
        """The local topic of upstream `topic`, None when the rule does not bring it down."""
        if not self.direction & IN:
            return None
        caps = capture(self.remote_levels, topic)
        if caps is None:
            return None
        return _map(self.local_levels, caps, self.hash_last)


def local_filter(rule):
    """A filter every local topic of `rule` matches: an "out" rule's filter
    itself; an "in" rule's template with each placeholder level a "+" (the
    capture of a last "#": "#", which ends it)."""
    if rule.direction & OUT:
        return rule.local
    out = []
    last = 0
    for lv in rule.remote_levels:
        if lv == "+" or lv == HASH:
            last += 1
    for lv in rule.local_levels:
        if lv == HASH or (rule.hash_last and "{%d}" % last in lv):
            out.append(HASH)
            break
        out.append("+" if "{" in lv else lv)
    return "/".join(out)


def acl_grants(rules):
    """The ACL rules (bits, filter, levels) a bridge's local client needs:
    read its "out" filters, write its "in" topics (login.client_rules adds
    them to what the ACL gives user bridge:NAME; docs/bridge.md)."""
    from common.broker.acl import READ, WRITE  # (only with an ACL: a board without one never loads it)

    out = []
    for r in rules:
        if r.direction & OUT:
            out.append((READ, r.local, tuple(r.local_levels)))
        if r.direction & IN:
            flt = local_filter(r)  # (a "both" rule's local side is its filter)
            out.append((WRITE, flt, tuple(flt.split("/"))))
    return out


def _map(template, caps, hash_last):
    """Fill `template` (levels: literal, "{n}", or a filter's wildcards in
    order); `hash_last`: the last capture is a "#"'s."""
    out = []
    k = 0
    last = len(caps)
    for lv in template:
        if lv == "+" or lv == HASH:
            k += 1
            text = caps[k - 1]
            if text or lv == "+":
                out.append(text)
            continue
        n = placeholder(lv)
        if n:
            text = caps[n - 1]
            if text or n != last or not hash_last:
                out.append(text)
            continue
        if "{" in lv:
            for i in range(last):
                lv = lv.replace("{%d}" % (i + 1), caps[i])
        out.append(lv)
    return "/".join(out)
