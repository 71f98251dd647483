# What the broker tells a listener below it: the state changes worth keeping.
#
# The broker and its handlers call these hooks unconditionally, at the
# moment a change happens; a listener decides what to do with them. This
# null listener (no store) does nothing. common/store/persist.py's Persist (the
# store layer, wired in by the shell) writes them to a Store and rebuilds the
# broker from it through the broker's public methods; the broker never
# imports it. Sessions that are not persistent are never `stored`, and a
# listener ignores their changes (see Persist.session_saved).


# The hooks of the null listener, one function object per arity rather
# than one per hook (each costs heap on a board), and not one `*args`
# function: that would allocate a tuple on every call, on the message path.
def _nothing0(self):
    return None


def _nothing1(self, a):
    return None


def _nothing2(self, a, b):
    return None


def _nothing3(self, a, b, c):
    return None


class StateListener:
    """The listener interface, with every hook a no-op."""

    # True when sync() has work to do: Broker asks pending() only then (and
    # then holds its acks back until it is synced: Output.take).
    durable = False

    # session_saved(session): a session connected, disconnected or changed
    #   its QoS 2 ids or expiry.
    # session_forgotten(session): a session ends; none of its state is kept.
    # sub_saved(session, sub): a subscription was added or its options replaced.
    # sub_removed(session, sub): a subscription was removed.
    # delivery_added(session, delivery): a new delivery joined the session's
    #   queue or inflight window.
    # delivery_sent(session, delivery): a queued delivery went out (now SENT,
    #   with its packet id).
    # window_saved(session): shutdown; what a listener did not keep of the
    #   session's inflight window (its QoS 1 deliveries' packet ids) is kept now.
    # delivery_released(session, delivery): a QoS 2 delivery got PUBREC (now RELEASED).
    # delivery_done(session, delivery): a delivery left the session
    #   (acknowledged, expired, dropped, handed over).
    # message_freed(msg): the last reference to a stored message went
    #   (msg.store_id != 0).
    # retained_set(msg): `msg` is now its topic's retained message.
    # retained_cleared(topic): the topic's retained message is gone.
    # restore(broker, now, wall): rebuild `broker` from what was kept; counts
    #   of what came back (None: nothing kept).
    # pending(): true when changes wait for sync() to be durable.
    # sync(): make every change so far durable.
    session_saved = session_forgotten = window_saved = message_freed = retained_set = retained_cleared = _nothing1
    sub_saved = sub_removed = _nothing2
    delivery_added = delivery_sent = delivery_released = delivery_done = _nothing2
    restore = _nothing3
    pending = sync = _nothing0

    def syncs(self):
        """How many times sync() made the store durable (the boards' heap line)."""
        return 0

    def store_health(self):
        """(boot counter, records skipped at restore, writes that failed) of
        the store; None without one (the Sparkplug edge node's figures)."""
        return None
