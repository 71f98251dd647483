# The retained message store: one pooled Message per topic, in a TopicTree.
#
# A retained PUBLISH replaces the topic's message; one with an empty payload
# clears it [MQTT-3.3.1-10] [MQTT-3.3.1-11]. The clients' messages are
# bounded by count and bytes (settings max_retained, max_retained_bytes);
# the broker's own $SYS topics are kept outside that budget, so they never
# take a client's room. A client's message that does not fit is refused to
# a v5 publisher at QoS 1/2 (PUBACK/PUBREC 0x97, handle_publish); otherwise
# it is still routed to current subscribers, just not kept, and counted.
# Expired messages (v5 Message Expiry) are removed when next looked at.

from common.broker.topics import TopicTree


class Retained:
    """Topic -> retained Message, bounded; changes go to the listener."""

    def __init__(self, settings, messages, stats, listener):
        self.settings = settings
        self.messages = messages
        self.stats = stats
        self.listener = listener
        self.tree = TopicTree()
        self.bytes = 0  # of the clients' messages: topic + payload
        self.own = 0  # the broker's own ($SYS) topics in the tree

    def count(self):
        return self.tree.count

    def fits(self, topic, payload):
        """Whether a client's retained message on `topic` would be kept."""
        if not payload:
            return True  # a clear always succeeds
        old = self.tree.get(topic)
        if old is not None:
            return self.bytes - old.size() + len(topic) + len(payload) <= self.settings.max_retained_bytes
        s = self.settings
        return self.tree.count - self.own < s.max_retained and self.bytes + len(topic) + len(payload) <= s.max_retained_bytes

    def store(self, topic, payload, qos, props, expiry, save=True):
        """Keep `payload` as the topic's retained message; the Message, or None.

        `save` tells the listener (off while restoring from it; never for
        $SYS, the broker's own, rebuilt at start).
        """
        tree = self.tree
        old = tree.get(topic)
        if not payload:
            if old is not None:
                self._forget(topic, old)
            return None
        own = topic.startswith("$SYS")  # only the broker publishes there
        if not own and not self.fits(topic, payload):
            self.stats.dropped_retained += 1
            return None
        msg = self.messages.new(topic, payload, qos, True, props, expiry)
        if msg is None:
            self.stats.dropped_retained += 1
            return None
        if old is not None:
            self._forget(topic, old)
        self.messages.hold(msg)
        tree.set(topic, msg)
        if own:
            self.own += 1
        else:
            self.bytes += len(topic) + len(payload)
            if save:
                self.listener.retained_set(msg)
        return msg

    def _forget(self, topic, msg):
        self.tree.remove(topic)
        if topic.startswith("$SYS"):
            self.own -= 1
        else:
            self.bytes -= msg.size()
        self.messages.drop(msg)
        self.listener.retained_cleared(topic)

    def matching(self, flt, out, now):
        """Append the live retained messages matching `flt` to `out`, in order."""
        self.tree.match_filter(flt, out)
        i = 0
        while i < len(out):
            if self._expired(out[i], now):
                del out[i]
            else:
                i += 1

    def current(self, topic, now):
        """The live retained message of `topic`, or None."""
        msg = self.tree.get(topic)
        if msg is None or self._expired(msg, now):
            return None
        return msg

    def cursor(self, flt):
        """The retained messages matching `flt`, one at a time, in order
        (topics.FilterCursor: next() gives the next, or None; an expired one
        too, which live() removes)."""
        return self.tree.cursor(flt)

    def live(self, msg, now):
        """True unless `msg` (from cursor()) has expired; an expired one is removed."""
        return not self._expired(msg, now)

    def _expired(self, msg, now):
        # An expired message is removed when next looked at [MQTT-3.3.2-5].
        if msg.expiry and now >= msg.expiry:
            self._forget(msg.topic, msg)
            self.stats.expired += 1
            return True
        return False
