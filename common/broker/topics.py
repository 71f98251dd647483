# Topic names, topic filters, shared subscriptions, and the two trees that
# route by topic: SubscriptionTrie (publish -> subscribers) and TopicTree
# (subscribe -> retained messages).
#
# Theory of operation
# -------------------
# Strings are `str` (the codec has already checked MQTT UTF-8). A topic is
# split on "/" into levels; an empty level is a real level ("/a" has two
# levels, "" and "a") [MQTT-4.7.1-1 (3.1.1: separator)].
#
# Validation (return 0 or a v5 reason code; never raise on peer data):
#   validate_topic_name(topic, max_levels, max_length) -> 0 | 0x90
#       empty [MQTT-4.7.3-1], "+" or "#" anywhere [MQTT-3.3.2-2]
#       [MQTT-4.7.0-1], U+0000 [MQTT-4.7.3-2], more than max_levels levels,
#       more than max_length UTF-8 bytes (0 = no limit for either).
#   validate_topic_filter(flt, max_levels, max_length) -> 0 | 0x8F
#       empty [MQTT-4.7.3-1], U+0000 [MQTT-4.7.3-2], "#" last and alone in its
#       level [MQTT-4.7.1-2], "+" a whole level [MQTT-4.7.1-3], the limits.
#       A filter starting with "$share/" is refused here: shared
#       subscriptions go through parse_shared() and the broker validates and
#       subscribes the inner filter.
#   parse_shared(flt) -> (None, flt)       a normal filter (validate it)
#                     -> (share_name, inner)  "$share/{share_name}/{inner}", inner valid
#                     -> SHARED_INVALID    == ("", None): answer 0x8F
#       [MQTT-4.8.2-1] share name at least one character; [MQTT-4.8.2-2]
#       share name without "/", "+", "#", followed by "/" and a (non-empty) filter.
#       The limits are not applied: the broker calls validate_topic_filter on
#       the inner filter with its limits.
#
# Matching:
#   topic_matches(flt, topic): reference matcher (tests, ACLs). "+" is one
#       level, "#" is the parent and any number of children ("sport/#"
#       matches "sport"), and a filter whose first level is a wildcard does
#       not match a topic starting with "$" [MQTT-4.7.2-1].
#   filter_covers(outer, inner): every topic matched by `inner` is matched by
#       `outer` (both valid normal filters). Exact, not just sound: it is
#       False only when some topic matches inner and not outer.
#
# SubscriptionTrie: one node per filter level; a node is a 4-slot list
#   [children: dict level -> node | None, plus: node | None,
#    hash: list of entries of "<this>/#" | None, subs: list of entries | None]
# (lists are far smaller than instances on MicroPython). Empty slots stay
# None, and remove() prunes nodes that became empty, so memory returns.
# Entries are opaque objects owned by the broker, compared by identity.
#
# Delivery order of match(topic, out) (identical on CPython and MicroPython:
# dicts are only looked up, never iterated). The walk starts at the root
# positioned before level 0; at a node positioned before level k it emits:
#   1. the node's "#" entries (the "#" level matches levels k..end),
#   2. everything reached through the node's "+" child,
#   3. everything reached through the child named exactly like level k.
# At the node reached after the last level it emits the node's own entries,
# then its "#" entries ("a/#" also matches "a"). Within one list, entries
# keep insertion order (remove() keeps the others' order). For a topic
# starting with "$", the root's "+" and "#" are skipped [MQTT-4.7.2-1].
#
# Fast path: an optional bounded cache topic -> list of matching entries
# (the empty tuple for "no subscribers"), cleared by every add()/remove().
# A cache hit is one dict lookup on the topic string (its hash is computed
# once when the string is made) and no allocation; a miss walks the trie
# with str.find offsets, slicing one level string per level that must be
# looked up in a children dict (nothing else is allocated). The budget
# `cache_bytes` approximates bytes on a 32-bit port: each cached topic costs
# 32 + len(topic) + 4 * len(entries); when the budget is full the cache is
# cleared and refills with the live topics (the dict table adds roughly a
# third on top). 0 disables it. A result bigger than the whole budget is
# never cached. The walk itself ends after one lookup when the first level
# has no subscribers, so even without the cache an unsubscribed topic is
# cheap. Measured (1000 filters, 8 rotating topics, loop overhead included):
#   CPython 3.11:    cache hit ~0.25-0.3 us; walk 0.8 us (miss at level 1),
#                    1.8-2 us (3 levels, "+" branch)
#   MicroPython 1.29 unix: cache hit ~0.55 us and 0 bytes; walk 2.1 us and
#                    ~96 B (64-bit port) per level string sliced
# A cache of topic -> result beats a first-level index because it removes
# the per-level slices, which are the only allocation left on MicroPython.
#
# TopicTree (retained messages): node = [children dict | None, value | None].
# Values are never None (set(topic, None) removes). match_filter(flt, out)
# follows exact levels with one dict lookup each (no scan for filters
# without wildcards), and visits children in sorted (code point) order at
# "+" and "#", so values come out ordered by their topic's level list
# compared lexicographically (tuple order of topic.split("/")), a parent
# before its children: "a", "a/", "a//x", "a/b", "a/b/c", "b".
# The first-level "$" rule applies to "+" and "#" at level 0.
# cursor(flt) gives the same values one at a time (FilterCursor: an
# explicit stack of the nodes being walked), so a retained replay sends its
# first message before it has looked at the others; match_filter(flt, out)
# gathers them all (the admin API).
# Recursion depth of every walk is bounded by the number of levels, which
# the broker bounds with max_topic_levels.

from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_RC_TOPIC_FILTER_INVALID = const(0x8F)
_RC_TOPIC_NAME_INVALID = const(0x90)

# the v5 reason codes these functions return, under this module's names
TOPIC_FILTER_INVALID: int = _RC_TOPIC_FILTER_INVALID  # 0x8F
TOPIC_NAME_INVALID: int = _RC_TOPIC_NAME_INVALID  # 0x90

# parse_shared() result for a "$share/" filter that breaks [MQTT-4.8.2-1/-2]
SHARED_INVALID = ("", None)

SHARE_PREFIX = "$share/"

# SubscriptionTrie node slots
_KIDS = const(0)
_PLUS = const(1)
_HASH = const(2)
_SUBS = const(3)
# TopicTree node slots (_KIDS too)
_VALUE = const(1)

_CACHE_ITEM_COST = const(32)


# ---------------------------------------------------------------- validation


def over_limits(s: str, max_levels: int, max_length: int) -> bool:
    """True if `s` has more levels or UTF-8 bytes than allowed (0 = no limit).

    The rest of a topic name's rules are the codec's (decode_publish,
    decode_connect): a name that arrives decoded only needs this check.
    """
    if max_levels > 0 and s.count("/") >= max_levels:
        return True
    if max_length > 0:
        n = len(s)  # code points; UTF-8 takes 1..4 bytes for each
        if n > max_length:
            return True
        if n * 4 > max_length:
            # ambiguous band only: count the bytes exactly (one copy)
            return len(s.encode()) > max_length
    return False


def validate_topic_name(topic: str, max_levels: int = 0, max_length: int = 0) -> int:
    """0 if `topic` may be published to, else TOPIC_NAME_INVALID."""
    if not topic:  # [MQTT-4.7.3-1]
        return TOPIC_NAME_INVALID
    if "+" in topic or "#" in topic:  # [MQTT-3.3.2-2] [MQTT-4.7.0-1]
        return TOPIC_NAME_INVALID
    if "\x00" in topic:  # [MQTT-4.7.3-2]
        return TOPIC_NAME_INVALID
    if over_limits(topic, max_levels, max_length):
        return TOPIC_NAME_INVALID
    return 0


def validate_topic_filter(flt: str, max_levels: int = 0, max_length: int = 0) -> int:
    """0 if `flt` is a valid normal (not shared) filter, else TOPIC_FILTER_INVALID."""
    if not flt:  # [MQTT-4.7.3-1]
        return TOPIC_FILTER_INVALID
    if "\x00" in flt:  # [MQTT-4.7.3-2]
        return TOPIC_FILTER_INVALID
    if flt.startswith(SHARE_PREFIX):  # must go through parse_shared()
        return TOPIC_FILTER_INVALID
    n = len(flt)
    i = flt.find("#")
    # [MQTT-4.7.1-2] "#" is the last character, alone or after a "/"
    if i >= 0 and (i != n - 1 or (i > 0 and flt[i - 1] != "/")):
        return TOPIC_FILTER_INVALID
    i = flt.find("+")
    while i >= 0:
        # [MQTT-4.7.1-3] "+" occupies a whole level
        if i > 0 and flt[i - 1] != "/":
            return TOPIC_FILTER_INVALID
        if i + 1 < n and flt[i + 1] != "/":
            return TOPIC_FILTER_INVALID
        i = flt.find("+", i + 1)
    if over_limits(flt, max_levels, max_length):
        return TOPIC_FILTER_INVALID
    return 0


def parse_shared(flt: str) -> "tuple[str | None, str | None]":
    """Split "$share/<share name>/<filter>"; see the header for the three results."""
    if not flt.startswith(SHARE_PREFIX):
        return None, flt
    start = len(SHARE_PREFIX)
    slash = flt.find("/", start)
    # [MQTT-4.8.2-1] share name at least one character; [MQTT-4.8.2-2]
    # followed by "/" (so the name itself holds no "/")
    if slash <= start:
        return SHARED_INVALID
    share_name = flt[start:slash]
    if "+" in share_name or "#" in share_name:  # [MQTT-4.8.2-2]
        return SHARED_INVALID
    inner = flt[slash + 1 :]
    # [MQTT-4.8.2-2] "/" followed by a Topic Filter (non-empty, valid,
    # itself not shared)
    if validate_topic_filter(inner, 0, 0):
        return SHARED_INVALID
    return share_name, inner


# ---------------------------------------------------------------- matching


def topic_matches(flt: str, topic: str) -> bool:
    """Reference matcher: does filter `flt` match topic name `topic`?"""
    f = flt.split("/")
    t = topic.split("/")
    first = f[0]
    # [MQTT-4.7.2-1] a leading wildcard does not match "$" topics
    if (first == "+" or first == "#") and topic.startswith("$"):
        return False
    nt = len(t)
    for i in range(len(f)):
        lv = f[i]
        if lv == "#":  # [MQTT-4.7.1-2] parent and any children
            return True
        if i >= nt:
            return False
        if lv != "+" and lv != t[i]:  # [MQTT-4.7.1-3] "+" is one level
            return False
    return len(f) == nt


def filter_covers(outer: str, inner: str) -> bool:
    """True when every topic matched by filter `inner` is matched by `outer`."""
    o = outer.split("/")
    i = inner.split("/")
    no = len(o)
    ni = len(i)
    # [MQTT-4.7.2-1] a leading wildcard in outer never matches "$" topics,
    # which a literal "$..." first level of inner matches
    if (o[0] == "+" or o[0] == "#") and i[0].startswith("$"):
        return False
    # "+/#" matches every topic "#" matches (a topic has at least one level)
    if ni == 1 and i[0] == "#" and no == 2 and o[0] == "+" and o[1] == "#":
        return True
    for j in range(no):
        a = o[j]
        if a == "#":  # covers the rest, including inner ending at j
            return True
        if j >= ni:  # inner matches topics of ni levels, outer needs more
            return False
        b = i[j]
        if b == "#":  # inner matches any depth from j; only "#" covers it
            return False
        if a == "+":
            continue
        if b == "+" or a != b:
            return False
    return ni == no


# ---------------------------------------------------------------- subscriptions


def _extend_end(node, out):
    # the walk consumed every level and stands on `node`
    s = node[_SUBS]
    if s is not None:
        out.extend(s)
    h = node[_HASH]
    if h is not None:  # "a/#" matches "a" [MQTT-4.7.1-2]
        out.extend(h)


def _descend(node, topic, pos, out):
    # `node` stands before the level that starts at topic[pos]; see the
    # header for the order. Recursion only into "+" children.
    while True:
        h = node[_HASH]
        if h is not None:
            out.extend(h)
        end = topic.find("/", pos)
        plus = node[_PLUS]
        if plus is not None:
            if end < 0:
                _extend_end(plus, out)
            else:
                _descend(plus, topic, end + 1, out)
        kids = node[_KIDS]
        if kids is None:
            return
        if end < 0:
            node = kids.get(topic[pos:] if pos else topic)
            if node is not None:
                _extend_end(node, out)
            return
        node = kids.get(topic[pos:end])
        if node is None:
            return
        pos = end + 1


def _new_sub_node():
    return [None, None, None, None]


def _index_is(lst, entry):
    for i in range(len(lst)):
        if lst[i] is entry:
            return i
    return -1


class SubscriptionTrie:
    """Filters -> opaque entries; match(topic, out) appends matching entries."""

    def __init__(self, cache_bytes: int = 0) -> None:
        self._root = _new_sub_node()
        self.count = 0
        self._cache_bytes = cache_bytes
        self._cache_used = 0
        self._cache: dict[str, object] | None = {} if cache_bytes > 0 else None
        self.generation = 1  # changes with every add and remove (_changed)

    def _changed(self):
        # A new generation: match results kept elsewhere (the broker's
        # TopicCache entries) are stale. Wraps to stay a small int.
        self.generation = self.generation + 1 if self.generation < 0x3FFFFFFF else 1
        cache = self._cache
        if cache:
            cache.clear()
            self._cache_used = 0

    def add(self, flt: str, entry) -> None:
        """Subscribe `entry` to a validated normal filter (no "$share/")."""
        node = self._root
        for lv in flt.split("/"):
            if lv == "#":  # always the last level (validated)
                h = node[_HASH]
                if h is None:
                    node[_HASH] = [entry]
                else:
                    h.append(entry)
                break
            if lv == "+":
                nxt = node[_PLUS]
                if nxt is None:
                    nxt = node[_PLUS] = _new_sub_node()
            else:
                kids = node[_KIDS]
                if kids is None:
                    kids = node[_KIDS] = {}
                nxt = kids.get(lv)
                if nxt is None:
                    nxt = kids[lv] = _new_sub_node()
            node = nxt
        else:
            s = node[_SUBS]
            if s is None:
                node[_SUBS] = [entry]
            else:
                s.append(entry)
        self.count += 1
        self._changed()

    def remove(self, flt: str, entry) -> bool:
        """Unsubscribe `entry` (by identity); prune emptied nodes. False if absent."""
        node = self._root
        nodes = []  # the nodes above `node` and the level leading down from each
        levels = []
        slot = _SUBS
        for lv in flt.split("/"):
            if lv == "#":
                slot = _HASH
                break
            nodes.append(node)
            levels.append(lv)
            if lv == "+":
                node = node[_PLUS]
            else:
                kids = node[_KIDS]
                node = kids.get(lv) if kids is not None else None
            if node is None:
                return False
        lst = node[slot]
        if lst is None:
            return False
        i = _index_is(lst, entry)
        if i < 0:
            return False
        del lst[i]  # keeps the order of the others
        if not lst:
            node[slot] = None
        while nodes:
            if node[0] is not None or node[1] is not None:
                break
            if node[2] is not None or node[3] is not None:
                break
            lv = levels.pop()
            parent = nodes.pop()
            if lv == "+":
                parent[_PLUS] = None
            else:
                kids = parent[_KIDS]
                del kids[lv]
                if not kids:
                    parent[_KIDS] = None
            node = parent
        self.count -= 1
        self._changed()
        return True

    def match(self, topic: str, out) -> None:
        """Append every entry whose filter matches `topic` to `out`."""
        cache = self._cache
        if cache is not None:
            hit = cache.get(topic)
            if hit is not None:
                if hit:
                    out.extend(hit)
                return
            n0 = len(out)
            self._walk(topic, out)
            n = len(out) - n0
            cost = _CACHE_ITEM_COST + len(topic) + 4 * n
            if cost > self._cache_bytes:
                return  # too big to cache: walk every time
            if self._cache_used + cost > self._cache_bytes:
                cache.clear()
                self._cache_used = 0
            # a private list, never mutated: list.extend(list) is a copy on
            # MicroPython, list.extend(tuple) allocates an iterator
            cache[topic] = out[n0:] if n else ()
            self._cache_used += cost
            return
        self._walk(topic, out)

    def _walk(self, topic, out):
        root = self._root
        if not topic.startswith("$"):
            _descend(root, topic, 0, out)
            return
        # [MQTT-4.7.2-1] the root's "+" and "#" never match a "$" topic
        kids = root[_KIDS]
        if kids is None:
            return
        end = topic.find("/")
        if end < 0:
            node = kids.get(topic)
            if node is not None:
                _extend_end(node, out)
            return
        node = kids.get(topic[:end])
        if node is not None:
            _descend(node, topic, end + 1, out)


# ---------------------------------------------------------------- retained


class FilterCursor:
    """The values of the topics a filter matches, one at a time (next()), in
    the order of the header's TopicTree paragraph.

    The walk keeps a stack of frames, one per node with children it is
    inside of: [node, its child names sorted, index of the next, mode]
    (mode: the filter level of a "+" there, or -1 when every topic below
    matches, "#"). A child is looked up by name when its turn comes, so the
    tree may change between calls: a topic removed meanwhile is skipped, one
    added under a node not yet entered is found, one added under a node
    being walked is not (its names were sorted on entry). Nothing is
    allocated per value, only per node with children entered.
    """

    def __init__(self, root, flt: str) -> None:
        self.root = root
        self.levels = flt.split("/")
        self.stack: list = []

    def next(self):
        """The next matching value, or None when the walk is over."""
        root = self.root
        if root is not None:  # the first call: down the filter's exact levels
            self.root = None
            v = self._enter(root, 0)
            if v is not None:
                return v
        stack = self.stack
        last = len(self.levels) - 1
        while stack:
            frame = stack[-1]
            j = frame[2]
            keys = frame[1]
            if j >= len(keys):
                stack.pop()
                continue
            frame[2] = j + 1
            kids = frame[0][_KIDS]
            child = kids.get(keys[j]) if kids is not None else None
            if child is None:
                continue  # removed since its names were sorted
            i = frame[3]
            if i < 0:  # below a "#": the child, then all below it (preorder)
                if child[_KIDS] is not None:
                    self._push(child, -1, -1)
                v = child[_VALUE]
            elif i == last:  # a "+" as the last level
                v = child[_VALUE]
            else:
                v = self._enter(child, i + 1)
            if v is not None:
                return v
        return None

    def _push(self, node, mode, level):
        keys = sorted(node[_KIDS])
        if level == 0:  # [MQTT-4.7.2-1] a wildcard first level skips "$" topics
            keys = [k for k in keys if not k.startswith("$")]
        self.stack.append([node, keys, 0, mode])

    def _enter(self, node, i):
        # `node` stands before filter level i: follow exact levels, push a
        # frame at a wildcard; the value to yield now, or None
        levels = self.levels
        last = len(levels) - 1
        while True:
            lv = levels[i]
            kids = node[_KIDS]
            if lv == "#":
                if kids is not None:
                    self._push(node, -1, i)
                return node[_VALUE] if i else None  # "a/#" matches "a" [MQTT-4.7.1-2]
            if kids is None:
                return None
            if lv == "+":
                self._push(node, i, i)
                return None
            node = kids.get(lv)
            if node is None or i == last:
                return None if node is None else node[_VALUE]
            i += 1


class TopicTree:
    """Topic name -> value (retained messages), with filter queries."""

    def __init__(self) -> None:
        self._root: list[object] = [None, None]
        self.count = 0

    def set(self, topic: str, value) -> None:
        if value is None:
            self.remove(topic)
            return
        node = self._root
        for lv in topic.split("/"):
            kids = node[_KIDS]
            if kids is None:
                kids = node[_KIDS] = {}
            nxt = kids.get(lv)
            if nxt is None:
                nxt = kids[lv] = [None, None]
            node = nxt
        if node[_VALUE] is None:
            self.count += 1
        node[_VALUE] = value

    def get(self, topic: str):
        node = self._root
        for lv in topic.split("/"):
            kids = node[_KIDS]
            if kids is None:
                return None
            node = kids.get(lv)
            if node is None:
                return None
        return node[_VALUE]

    def remove(self, topic: str):
        """Remove and return the value stored at `topic` (None if none); prune."""
        node = self._root
        nodes = []  # the nodes above `node` and the level leading down from each
        levels = []
        for lv in topic.split("/"):
            kids = node[_KIDS]
            if kids is None:
                return None
            nodes.append(node)
            levels.append(lv)
            node = kids.get(lv)
            if node is None:
                return None
        value = node[_VALUE]
        if value is None:
            return None
        node[_VALUE] = None
        self.count -= 1
        while nodes and node[_KIDS] is None and node[_VALUE] is None:
            lv = levels.pop()
            parent = nodes.pop()
            kids = parent[_KIDS]
            del kids[lv]
            if not kids:
                parent[_KIDS] = None
            node = parent
        return value

    def cursor(self, flt: str) -> FilterCursor:
        """The values of the topics the valid filter `flt` matches, one at a time."""
        return FilterCursor(self._root, flt)

    def match_filter(self, flt: str, out) -> None:
        """Append the value of every topic matched by the valid filter `flt`."""
        cursor = FilterCursor(self._root, flt)
        v = cursor.next()
        while v is not None:
            out.append(v)
            v = cursor.next()
