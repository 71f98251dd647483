# Token buckets shared by a group of connections: one per user name
# (user_rate_*) and one per listener (listener_rate_*), beside each client's
# own (ratelimit.py, which charges and holds back; this module only keeps
# the tables).
#
# Theory of operation. A group has one bucket per kind (PUBLISHes,
# PUBLISH bytes, subscribed filters), in a table indexed by the group's
# slot (buckets.py), holding at most one second's worth and refilled from
# the ms clock, as a client's own. Every connection of the group takes from the same bucket,
# so a user cannot get more by opening more connections, nor a listener's
# clients more by being many.
#
# The user table is bounded: `slots` entries (the broker's connection
# slots), made at start. A user name holds a slot while it has a connection
# and, after its last one closed, until its bucket is full again (so that a
# reconnect does not wipe a debt). Users with a connection are never more
# than the connections, so a user who logs in always finds a slot: a free
# one, else the oldest idle one (no connection, still in debt), whose debt
# is then forgiven (counted in `forgiven`). Anonymous clients have no user
# bucket (their listener's still holds them).
#
# Listeners are few and named by the shell (an index from 0): their table
# grows to the highest index seen, at a connect, never per packet; a slot
# takes its listener's own listener_rate_* where it sets them (rate_listeners.py).

from common.broker.buckets import Buckets


class UserBuckets(Buckets):
    """One bucket set per logged-in user name, in a table of `slots` entries."""

    def __init__(self, rates, slots):
        super().__init__(rates, slots)
        self.slot_of = {}  # user name -> slot
        self.name = [None] * slots  # slot -> user name (None: free)
        self.refs = [0] * slots  # slot -> its live connections
        self.free = list(range(slots - 1, -1, -1))
        self.idle = []  # slots without connections, still in debt: oldest first
        self.forgiven = 0  # idle debts dropped to make room (never, unless the table is full)

    def join(self, user, ms):
        """A connection of `user` logged in at tick `ms`: its slot."""
        slot = self.slot_of.get(user)
        if slot is None:
            if self.free:
                slot = self.free.pop()
            else:
                slot = self.idle.pop(0)  # (exists: users with a connection < slots)
                del self.slot_of[self.name[slot]]
                self.forgiven += 1
            self.slot_of[user] = slot
            self.name[slot] = user
            self.fill(slot, ms)
        elif self.refs[slot] == 0:
            self.idle.remove(slot)
        self.refs[slot] += 1
        return slot

    def leave(self, slot):
        """A connection of the user in `slot` ended."""
        self.refs[slot] -= 1
        if self.refs[slot] == 0:
            if self.full(slot):
                self._free(slot)
            else:
                self.idle.append(slot)

    def refill_all(self, ms):
        """Each second: refill the slots in use; idle ones full again are freed."""
        for slot in range(len(self.name)):
            if self.name[slot] is not None:
                self.refill(slot, ms)
        i = 0
        while i < len(self.idle):
            slot = self.idle[i]
            if self.full(slot):
                self.idle.pop(i)
                self._free(slot)
            else:
                i += 1

    def in_use(self):
        return len(self.slot_of)

    def _free(self, slot):
        del self.slot_of[self.name[slot]]
        self.name[slot] = None
        self.free.append(slot)


class ListenerBuckets(Buckets):
    """One bucket set per listener index the shell names."""

    def __init__(self, rates, own=None):
        super().__init__(rates, 0)
        self.own = own  # rate_listeners.ListenerRates: the listeners' own listener_rate_*, or None

    def slot(self, index, ms):
        """The slot of listener `index` (its table grown at a connect)."""
        while len(self.last) <= index:
            self.grow()
            slot = len(self.last) - 1
            if self.own is not None:
                self.own.set_listener(self, slot)
            self.fill(slot, ms)
        return index

    def refill_all(self, ms):
        for slot in range(len(self.last)):
            self.refill(slot, ms)
