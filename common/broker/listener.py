# What the broker tells a listener below it: the state changes worth keeping.
#
# The broker and its handlers call these methods unconditionally, at the
# moment a change happens; a listener decides what to do with them. This
# null listener (no store) does nothing. common/store/persist.py's Persist (the
# store layer, wired in by the shell) writes them to a Store and rebuilds the
# broker from it through the broker's public methods; the broker never
# imports it. Sessions that are not persistent are never `stored`, and a
# listener ignores their changes (see Persist.session_saved).


class StateListener:
    """The listener interface, with every hook a no-op."""

    # True when sync() has work to do: Broker.take_dirty asks pending() only then.
    durable = False

    def session_saved(self, session):
        """A session connected, disconnected or changed its QoS 2 ids or expiry."""

    def session_forgotten(self, session):
        """A session ends: none of its state is kept."""

    def sub_saved(self, session, sub):
        """A subscription was added or its options replaced."""

    def sub_removed(self, session, sub):
        """A subscription was removed."""

    def delivery_added(self, session, delivery):
        """A new delivery joined the session's queue or inflight window."""

    def delivery_sent(self, session, delivery):
        """A queued delivery went out (now SENT, with its packet id)."""

    def delivery_released(self, session, delivery):
        """A QoS 2 delivery got PUBREC (now RELEASED)."""

    def delivery_done(self, session, delivery):
        """A delivery left the session (acknowledged, expired, dropped, handed over)."""

    def message_freed(self, msg):
        """The last reference to a stored message went (msg.store_id != 0)."""

    def retained_set(self, msg):
        """`msg` is now its topic's retained message."""

    def retained_cleared(self, topic):
        """The topic's retained message is gone."""

    def restore(self, broker, now, wall):
        """Rebuild `broker` from what was kept; counts of what came back."""
        return None

    def pending(self):
        """True when changes wait for sync() to be durable."""
        return False

    def syncs(self):
        """How many times sync() made the store durable (the boards' heap line)."""
        return 0

    def sync(self):
        """Make every change so far durable."""
