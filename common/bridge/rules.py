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
matches "a") that level goes, with its separator.
"""

from common.broker.topics import validate_topic_filter, validate_topic_name
from common.compat import const

OUT = const(1)
IN = const(2)
BOTH = const(3)
DIRECTIONS = {"out": OUT, "in": IN, "both": BOTH}

_HASH = "#"


class RuleError(Exception):
    """A rule that cannot be used; the text says why (the settings add where)."""


def _levels(text):
    return text.split("/")


def _wildcards(levels):
    """The wildcards of a filter's levels, in order ("+" / "#")."""
    return [lv for lv in levels if lv == "+" or lv == _HASH]


def _placeholder(level):
    """n of a level that is exactly "{n}", else 0."""
    if len(level) > 2 and level[0] == "{" and level[-1] == "}" and level[1:-1].isdigit():
        return int(level[1:-1])
    return 0


def _as_template(levels):
    """A filter's levels as a template: its k-th wildcard becomes {k}."""
    out = []
    k = 0
    for lv in levels:
        if lv == "+" or lv == _HASH:
            k += 1
            out.append("{%d}" % k)
        else:
            out.append(lv)
    return out


def capture(levels, topic):
    """What the wildcards of filter `levels` matched in `topic` (a list of
    strings, a `#`'s joined with "/"), or None when it does not match."""
    if topic[:1] == "$" and (levels[0] == "+" or levels[0] == _HASH):
        return None  # [MQTT-4.7.2-1]
    parts = topic.split("/")
    caps = []
    n = len(parts)
    for i in range(len(levels)):
        f = levels[i]
        if f == _HASH:
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
        self.hash_last = src[-1] == _HASH  # (both sides of a "both" rule have the same wildcards)
        self._check()

    def _check(self):
        d = self.direction
        if d & OUT:
            self._check_side(self.local, self.local_levels, self.remote, self.remote_levels, d == BOTH)
        if d & IN:
            self._check_side(self.remote, self.remote_levels, self.local, self.local_levels, d == BOTH)

    def _check_side(self, flt, flt_levels, tpl, tpl_levels, both):
        if validate_topic_filter(flt):
            raise RuleError("%r is not a valid topic filter" % flt)
        caps = _wildcards(flt_levels)
        if validate_topic_filter(tpl) == 0 and _wildcards(tpl_levels):
            # A filter on the other side too: its wildcards in order.
            if _wildcards(tpl_levels) != caps:
                raise RuleError(
                    "%r and %r do not have the same wildcards in the same order; use {n} to place what %r matched"
                    % (flt, tpl, flt)
                )
            return
        if both:
            raise RuleError(
                'a "both" rule maps each way: both sides are filters with the same wildcards (%r, %r)' % (flt, tpl)
            )
        probe = []
        for lv in tpl_levels:
            n = _placeholder(lv)
            if n:
                if n > len(caps):
                    raise RuleError("%r names {%d} but %r has %d wildcard(s)" % (tpl, n, flt, len(caps)))
                probe.append("x")
                continue
            if "{" in lv:
                for i in range(len(caps)):
                    if caps[i] == _HASH and "{%d}" % (i + 1) in lv:
                        raise RuleError("{%d} (the levels a '#' matched) must be a whole level in %r" % (i + 1, tpl))
                    lv = lv.replace("{%d}" % (i + 1), "x")
                if "{" in lv or "}" in lv:
                    raise RuleError("%r: a placeholder is {n}, n from 1 to %d" % (tpl, len(caps)))
            probe.append(lv)
        if validate_topic_name("/".join(probe)):
            raise RuleError("%r does not make a valid topic name (no + or # on this side: {n})" % tpl)

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

    def remote_image(self):
        """A filter for every topic an "out" rule can send up (the loop check)."""
        out = []
        for lv in self.remote_levels:
            if lv == "+" or lv == _HASH:
                out.append(lv)
                if lv == _HASH:
                    break
                continue
            n = _placeholder(lv)
            if n and _wildcards(self.local_levels)[n - 1] == _HASH:
                out.append(_HASH)
                break
            out.append("+" if "{" in lv else lv)
        return "/".join(out)


def _map(template, caps, hash_last):
    """Fill `template` (levels: literal, "{n}", or a filter's wildcards in
    order); `hash_last`: the last capture is a "#"'s."""
    out = []
    k = 0
    last = len(caps)
    for lv in template:
        if lv == "+" or lv == _HASH:
            k += 1
            text = caps[k - 1]
            if text or lv == "+":
                out.append(text)
            continue
        n = _placeholder(lv)
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


def overlap(a, b):
    """Whether some topic matches both filters `a` and `b`."""
    x = a.split("/")
    y = b.split("/")
    n = min(len(x), len(y))
    for k in range(n):
        p = x[k]
        q = y[k]
        if p == _HASH or q == _HASH:
            return True
        if p != q and p != "+" and q != "+":
            return False
    if len(x) == len(y):
        return True
    longer = x if len(x) > len(y) else y
    return len(longer) == n + 1 and longer[n] == _HASH  # "a/#" matches "a"
