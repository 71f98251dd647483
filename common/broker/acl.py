# Access control: who may read and write which topics.
#
# Theory of operation. An Acl holds rules as Mosquitto's acl_file writes
# them (parse()), or the same rules from the host's TOML (from_rules()):
#
#     # comment
#     topic read sensors/#            before any "user" line: anonymous clients
#     user alice                      the lines after it: alice's rules
#     topic readwrite home/#
#     topic deny home/secret
#     pattern write devices/%c/out    every client; %u user name, %c client id
#
# Access is read, write, readwrite (the default when left out) or deny. Once
# an ACL is configured, everything is denied that no rule allows, and a
# deny rule wins over any allow rule (Mosquitto 2 checks denials first).
# An unknown keyword or access word stops the loading with
# "FILE:LINE: reason".
#
# At CONNECT the broker asks for_client(user, client_id) for the rules of
# one client (a ClientAcl, shared by every connection of a user when no
# pattern applies). substitute() puts the user name and client id into a
# pattern in ONE pass: what it puts in is never scanned again, so a user
# named "%c" gets the literal level "%c", never another client's id. It
# refuses a value that would widen the pattern: one that is empty or holds
# "+", "#" or "/" (a wildcard, or a level boundary: "devices/+/#"), or
# that starts with "$" where it starts the filter ("$SYS/#" from
# "%c/#"). A client with such a name gets no rules at all (every check
# denies; ClientAcl.refused names the identity for the log).
#
# Checks, each exact on the topic grammar of common/broker/topics.py:
#   can_write(topic)      PUBLISH and the will at CONNECT
#   can_read(topic)       every message sent to the client (hot path)
#   may_subscribe(flt)    SUBSCRIBE: granted only if EVERY topic the filter
#       can match is readable: some read rule covers the whole filter
#       (filter_covers) and no deny rule shares a topic with it (overlap).
#       So "home/+" granted does not grant "home/#", "+/+" or "#"; a
#       filter covered only by the union of several rules is refused
#       (subscribe to each part). $share/G/F is judged on F. $SYS topics
#       are readable only through a rule that names $SYS: a first-level
#       wildcard never matches a "$" topic [MQTT-4.7.2-1].
# can_read/can_write walk the topic with str.find offsets against each
# rule's pre-split levels: nothing is allocated per message.

from common.broker.settings import ConfigError, content_lines
from common.broker.topics import filter_covers, validate_topic_filter
from common.compat import const

READ = const(1)
WRITE = const(2)
DENY = const(4)

ACCESS = {"read": READ, "write": WRITE, "readwrite": READ | WRITE, "deny": DENY}
# Characters an identity put into a pattern must not hold (substitute()).
WIDENING = "+#/"


def _matches(levels, topic):
    """Does the filter split into `levels` match `topic`? (no allocation)"""
    first = levels[0]
    if (first == "+" or first == "#") and topic.startswith("$"):
        return False  # [MQTT-4.7.2-1]
    n = len(topic)
    pos = 0
    for lv in levels:
        if lv == "#":
            return True  # [MQTT-4.7.1-2] the parent and any children
        if pos > n:
            return False  # the topic has fewer levels
        end = topic.find("/", pos)
        if end < 0:
            end = n
        if lv != "+" and (end - pos != len(lv) or not topic.startswith(lv, pos)):
            return False
        pos = end + 1
    return pos == n + 1


def filters_overlap(a, b):
    """True when some topic name matches both valid filters `a` and `b`."""
    x = a.split("/")
    y = b.split("/")
    # [MQTT-4.7.2-1] a first-level wildcard never matches a "$" topic, which
    # is the only kind a literal "$..." first level matches.
    if (x[0] == "+" or x[0] == "#") and y[0].startswith("$"):
        return False
    if (y[0] == "+" or y[0] == "#") and x[0].startswith("$"):
        return False
    nx = len(x)
    ny = len(y)
    i = 0
    while True:
        if i == nx:
            return i == ny or y[i] == "#"  # "a/#" matches "a"
        if i == ny:
            return x[i] == "#"
        p = x[i]
        q = y[i]
        if p == "#" or q == "#":
            return True
        if p != "+" and q != "+" and p != q:
            return False
        i += 1


class ClientAcl:
    """The rules of one client: (bits, filter, levels) each. `refused`:
    (user, client id) when a pattern refused them (then there are no
    rules), else None."""

    def __init__(self, rules, refused=None):
        self.rules = rules
        self.refused = refused

    def _allows(self, bit, topic):
        allowed = False
        for bits, _flt, levels in self.rules:
            if bits & (DENY | bit) and _matches(levels, topic):
                if bits & DENY:
                    return False
                allowed = True
        return allowed

    def can_read(self, topic):
        return self._allows(READ, topic)

    def can_write(self, topic):
        return self._allows(WRITE, topic)

    def may_subscribe(self, flt):
        """Whether every topic the valid (inner) filter `flt` matches is readable."""
        covered = False
        for bits, rule, _levels in self.rules:
            if bits & DENY:
                if filters_overlap(rule, flt):
                    return False
            elif bits & READ and not covered and filter_covers(rule, flt):
                covered = True
        return covered


def _rule(bits, flt, where):
    if validate_topic_filter(flt, 0, 0):
        raise ConfigError("%s: %r is not a valid topic filter" % (where, flt))
    return (bits, flt, tuple(flt.split("/")))


class Acl:
    """The whole ACL: anonymous rules, rules per user, patterns."""

    def __init__(self):
        self.anonymous = []  # rules of clients without a user name
        self.by_user = {}  # user -> rules
        self.patterns = []  # (bits, pattern text)
        self._shared = {}  # user -> ClientAcl (when no pattern applies)

    def rule_count(self):
        n = len(self.anonymous) + len(self.patterns)
        for rules in self.by_user.values():
            n += len(rules)
        return n

    @staticmethod
    def parse(text, where, acl=None):
        """Add the rules of an acl_file's `text` (Mosquitto's format)."""
        if acl is None:
            acl = Acl()
        rules = acl.anonymous
        for number, line in content_lines(text):
            at = "%s:%d" % (where, number)
            space = line.find(" ")
            word = line if space < 0 else line[:space]
            rest = "" if space < 0 else line[space + 1 :].strip()
            if word == "user":
                if not rest:
                    raise ConfigError("%s: 'user' needs a user name" % at)
                rules = acl.by_user.get(rest)
                if rules is None:
                    rules = acl.by_user[rest] = []
                continue
            if word != "topic" and word != "pattern":
                raise ConfigError("%s: unknown keyword %r (wants topic, pattern or user)" % (at, word))
            if not rest:
                raise ConfigError("%s: %r needs a topic" % (at, word))
            # "topic [read|write|readwrite|deny] TOPIC": the topic is the
            # rest of the line, spaces included (as Mosquitto reads it).
            space = rest.find(" ")
            bits = READ | WRITE
            if space > 0:
                access = ACCESS.get(rest[:space])
                if access is None:
                    raise ConfigError(
                        "%s: unknown access %r (wants read, write, readwrite or deny)" % (at, rest[:space])
                    )
                bits = access
                rest = rest[space + 1 :].strip()
            acl._add(word, bits, rest, rules, at)
        return acl

    @staticmethod
    def from_rules(items, where, acl=None):
        """Add rules given as tables (the host's TOML):
        {topic = F, access = A, user = U} or {pattern = P, access = A}."""
        if acl is None:
            acl = Acl()
        index = 0
        for item in items:
            index += 1
            at = "%s rule %d" % (where, index)
            if not isinstance(item, dict):
                raise ConfigError("%s: wants a table {topic = ..., access = ...}" % at)
            for key in item:
                if key not in ("topic", "pattern", "access", "user"):
                    raise ConfigError("%s: unknown key %r (wants topic or pattern, access, user)" % (at, key))
            access = item.get("access", "readwrite")
            bits = ACCESS.get(access) if isinstance(access, str) else None
            if bits is None:
                raise ConfigError("%s: access = %r: wants read, write, readwrite or deny" % (at, access))
            user = item.get("user")
            word = "pattern" if "pattern" in item else "topic"
            flt = item.get(word)
            if not isinstance(flt, str) or ("topic" in item and "pattern" in item):
                raise ConfigError("%s: wants one topic or pattern (a string)" % at)
            if user is not None and (word == "pattern" or not isinstance(user, str) or not user):
                raise ConfigError("%s: user wants a non-empty string, and a pattern applies to every user" % at)
            if user is None:
                rules = acl.anonymous
            else:
                rules = acl.by_user.get(user)
                if rules is None:
                    rules = acl.by_user[user] = []
            acl._add(word, bits, flt, rules, at)
        return acl

    def _add(self, word, bits, flt, rules, at):
        if word == "pattern":
            # Checked as a filter with stand-in names for %u and %c.
            _rule(bits, substitute(flt, "u", "c"), at)
            self.patterns.append((bits, flt))
        else:
            rules.append(_rule(bits, flt, at))

    def for_client(self, user, client_id):
        """The ClientAcl of a client (None user: anonymous)."""
        base = self.anonymous if user is None else self.by_user.get(user, ())
        if not self.patterns:
            shared = self._shared.get(user)
            if shared is None:
                shared = self._shared[user] = ClientAcl(list(base))
            return shared
        rules = list(base)
        for bits, pattern in self.patterns:
            if (user is None and "%u" in pattern) or (client_id is None and "%c" in pattern):
                # (Mosquitto: a pattern with %u skips anonymous clients; an
                # HTTP login (cpython_host/operations/http_server.py) has no client id.)
                continue
            flt = substitute(pattern, user, client_id)
            if flt is None:
                return ClientAcl([], (user, client_id))
            rules.append((bits, flt, tuple(flt.split("/"))))
        return ClientAcl(rules)


def _widens(value, first):
    """Whether `value`, put into a pattern (at its very start when `first`),
    could match more than its own one level."""
    if not value or (first and value[0] == "$"):
        return True
    for ch in WIDENING:
        if ch in value:
            return True
    return False


def substitute(pattern, user, client_id):
    """`pattern` with each %u (user) and %c (client id) replaced, in one
    pass; None if a value put in would widen it (_widens)."""
    out = []
    copied = 0  # pattern[:copied] is in `out`
    at = pattern.find("%")
    while 0 <= at < len(pattern) - 1:
        code = pattern[at + 1]
        if code == "u" or code == "c":
            value = user if code == "u" else client_id
            if _widens(value, at == 0):
                return None
            out.append(pattern[copied:at])
            out.append(value)
            copied = at + 2
            at = pattern.find("%", copied)
        else:
            at = pattern.find("%", at + 1)
    out.append(pattern[copied:])
    return "".join(out)
