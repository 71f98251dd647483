# The retained message store: one pooled Message per topic, in a TopicTree.
#
# A retained PUBLISH replaces the topic's message; one with an empty payload
# clears it [MQTT-3.3.1-10] [MQTT-3.3.1-11]. The store is bounded by count
# and bytes (settings max_retained, max_retained_bytes); a message that does
# not fit is still routed to current subscribers, just not kept, and counted.
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
        self.bytes = 0

    def count(self):
        return self.tree.count

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
        s = self.settings
        size = len(topic) + len(payload)
        freed = old.size() if old is not None else 0
        count = tree.count - (1 if old is not None else 0)
        if count >= s.max_retained or self.bytes - freed + size > s.max_retained_bytes:
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
        self.bytes += size
        if save and not topic.startswith("$SYS"):
            self.listener.retained_set(msg)
        return msg

    def _forget(self, topic, msg):
        self.tree.remove(topic)
        self.bytes -= msg.size()
        self.messages.drop(msg)
        self.listener.retained_cleared(topic)

    def matching(self, flt, out, now):
        """Append the live retained messages matching `flt` to `out`, in order."""
        self.tree.match_filter(flt, out)
        i = 0
        while i < len(out):
            msg = out[i]
            if msg.expiry and now >= msg.expiry:
                self._forget(msg.topic, msg)  # [MQTT-3.3.2-5]
                self.stats.expired += 1
                del out[i]
            else:
                i += 1
