# The topic names of the PUBLISHes seen lately, with the subscriptions each
# one matches: a warm topic costs a hash and a compare over its bytes, no new
# str (MicroPython allocates one per decode otherwise) and no trie walk.
#
# The codec asks it for a topic name while decoding a PUBLISH into the
# broker's reused Publish (packets.decode_publish_into: find, then add for a
# name it did not know, after checking it); route asks it for the matches of
# the topic it routes (matches). The entry of the name decoded last is
# `entry`; route uses it only for that very str, so an entry left from an
# earlier PUBLISH (a $SYS message, a will, an aliased topic) is never taken
# for another topic.

from common.compat import const
from common.mqtt.codec import take_bytes

# An entry is a list of four fields (a list of four costs less than an
# object of four attributes on MicroPython):
_NAME = const(0)  # the topic name's bytes as received
_TOPIC = const(1)  # the str decoded and checked when it was first seen
_MATCHES = const(2)  # the trie's match list for it (never modified), or None
_GENERATION = const(3)  # the trie generation that list holds for


class TopicCache:
    """`capacity` slots, one entry each, chosen by a hash of the name's bytes
    (a newcomer replaces only the entry in its slot); a topic gets an entry
    at its second PUBLISH in a row for its slot, so that names seen once (a
    retained message per device) take no room."""

    def __init__(self, capacity):
        self.slots = [None] * capacity  # hash % capacity -> entry
        self.seen = [-1] * capacity  # the hash last missed in each slot
        self.hash = 0  # the hash find() computed last (add() files under it)
        self.entry = None  # the entry of the topic decoded last, or None

    def find(self, buf, a, b):
        """The topic str of the name buf[a:b] if it is cached, else None."""
        h = b - a
        for k in range(a, b):
            h = (h * 31 + buf[k]) & 0x3FFFFF  # small ints on every port
        self.hash = h
        self.entry = None
        entry = self.slots[h % len(self.slots)]
        if entry is None:
            return None
        key = entry[_NAME]
        if len(key) != b - a:
            return None
        for c in key:
            if c != buf[a]:
                return None
            a += 1
        self.entry = entry
        return entry[_TOPIC]

    def add(self, buf, a, b, topic):
        """Cache the checked topic name buf[a:b] as `topic` (after find()
        missed it), unless this is its first miss in its slot."""
        h = self.hash
        i = h % len(self.slots)
        if self.seen[i] != h:
            self.seen[i] = h
            return
        entry = [take_bytes(buf, a, b), topic, None, 0]
        self.slots[i] = entry
        self.entry = entry

    def matches(self, topic, trie, scratch):
        """The subscriptions (and shared groups) whose filter matches `topic`:
        the list kept in its entry while the trie has not changed since
        (never modified by the caller), else the trie's answer, kept there;
        for a topic not cached, the trie's answer in `scratch`."""
        entry = self.entry
        if entry is None or entry[_TOPIC] is not topic:
            trie.match(topic, scratch)
            return scratch
        if entry[_GENERATION] != trie.generation:
            found = []
            trie.match(topic, found)
            entry[_MATCHES] = found
            entry[_GENERATION] = trie.generation
        return entry[_MATCHES]
