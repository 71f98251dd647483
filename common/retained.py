# The retained message store: one pooled Message per topic, in a TopicTree.
#
# A retained PUBLISH replaces the topic's message; one with an empty payload
# clears it [MQTT-3.3.1-10] [MQTT-3.3.1-11]. The store is bounded by count
# and bytes (settings max_retained, max_retained_bytes); a message that does
# not fit is still routed to current subscribers, just not kept, and counted.
# Expired messages (v5 Message Expiry) are removed when next looked at.


def store(broker, topic, payload, qos, props, expiry, origin, save=True):
    """Keep `payload` as the topic's retained message; the Message, or None.

    `save` writes it to the persistent store (off while restoring from it).
    """
    tree = broker.retained
    messages = broker.messages
    old = tree.get(topic)
    if not payload:
        if old is not None:
            _forget(broker, topic, old)
        return None
    s = broker.settings
    size = len(topic) + len(payload)
    freed = old.size if old is not None else 0
    count = tree.count - (1 if old is not None else 0)
    if count >= s.max_retained or broker.retained_bytes - freed + size > s.max_retained_bytes:
        broker.stats.dropped_retained += 1
        return None
    msg = messages.new(topic, payload, qos, True, props, expiry, origin)
    if msg is None:
        broker.stats.dropped_retained += 1
        return None
    if old is not None:
        _forget(broker, topic, old)
    messages.hold(msg)
    tree.set(topic, msg)
    broker.retained_bytes += msg.size
    if save and broker.persist is not None and not topic.startswith("$SYS"):
        broker.persist.retained_set(msg)  # $SYS is the broker's own, rebuilt at start
    return msg


def _forget(broker, topic, msg):
    broker.retained.remove(topic)
    broker.retained_bytes -= msg.size
    broker.messages.drop(msg)
    if broker.persist is not None:
        broker.persist.retained_cleared(topic)


def matching(broker, flt, out, now):
    """Append the live retained messages matching `flt` to `out`, in order."""
    broker.retained.match_filter(flt, out)
    i = 0
    while i < len(out):
        msg = out[i]
        if msg.expiry and now >= msg.expiry:
            _forget(broker, msg.topic, msg)  # [MQTT-3.3.2-5]
            broker.stats.expired += 1
            del out[i]
        else:
            i += 1
