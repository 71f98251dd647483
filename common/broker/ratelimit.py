# Rate limits per client, per user and per listener: PUBLISHes/s, PUBLISH
# bytes/s and subscribed filters/s inbound, as token buckets (settings
# rate_*, user_rate_*, listener_rate_*; 0 = that one off; all 0, the
# default: this module is never loaded and the broker's hooks cost one
# `is None` test). Connects/s per source address are connect_rate.py's.
#
# Theory of operation. Each bucket holds at most one second's worth
# (its rate) and is refilled by rate x the whole seconds passed (MQTT
# timers are whole seconds), in integers, in lists indexed by connection
# id made at start (nothing is allocated per packet). A packet is handled,
# then charged (a PUBLISH one message and its frame's bytes, a SUBSCRIBE
# its filters); a bucket that goes below zero is in debt, and its client
# is held back: put with the publishers the broker does not read
# (Broker.throttled, as the queue budgets do), so what it sends waits in
# its socket and TCP slows it. tick() (each second) refills the buckets
# and reads the clients whose debts are paid again. So the rate holds on
# average, and a burst of one second's worth passes at once.
#
# Shared buckets (rate_groups.py): user_rate_* take from one bucket per
# user name for all its connections, listener_rate_* from one per listener
# for all of its clients. A charge takes from the client's own bucket and
# from its user's and its listener's; the client is held back if any of
# them is in debt, and read again once none is. The hold is counted by the
# first bucket in debt (own, user, listener), per kind.
#
# A client held back at every tick for `rate_grace` seconds in a row does
# not slow down: it is disconnected (v5 DISCONNECT 0x96 Message rate too
# high, 3.1.1 close), counted in closed_rate_limited. rate_grace 0: never
# (back-pressure only). Each hold is counted by cause (rate_held_messages,
# _bytes, _subscribes; rate_held_user_*, rate_held_listener_*) and logged, at most one line a second. A bridge's
# local client (routing.unthrottled: what comes down from its upstream) is
# not limited here. Holding back, counting, logging and closing are
# rate_hold.py's, loaded when a client first goes into debt: a board whose
# clients keep to their rates keeps only the buckets' code.

from common.broker.connection import CONNECTED


class RateLimits:
    def __init__(self, settings, slots):
        s = settings
        rates = [
            s.rate_messages, s.rate_bytes, s.rate_subscribes,
            s.user_rate_messages, s.user_rate_bytes, s.user_rate_subscribes,
            s.listener_rate_messages, s.listener_rate_bytes, s.listener_rate_subscribes,
        ]  # fmt: skip  (cause = scope * 3 + kind: rate_hold.CAUSES)
        self.rates = rates[0:3]
        self.on = [rates[k] or rates[3 + k] or rates[6 + k] for k in range(3)]  # kind -> any scope limits it
        # The shared buckets' module only when one is set (a board's
        # default sets per-client rates only: its heap holds no more).
        self.users = None
        self.listeners = None
        if rates[3] or rates[4] or rates[5]:
            from common.broker.rate_groups import UserBuckets

            self.users = UserBuckets(rates[3:6], slots)
        if rates[6] or rates[7] or rates[8]:
            from common.broker.rate_groups import ListenerBuckets

            self.listeners = ListenerBuckets(rates[6:9])
        self.grace = settings.rate_grace
        self.tokens = [[rate] * slots for rate in self.rates]  # bucket -> cid -> tokens
        self.last = [0] * slots  # cid -> the second of its last refill
        self.hit = [0] * slots  # cid -> 1: went into debt since the last refill
        self.held = [0] * slots  # cid -> held back at every refill since this second (0: not)
        self.user_of = [-1] * slots  # cid -> its user's slot in users (-1: none)
        self.listener_of = [-1] * slots  # cid -> its listener's slot in listeners (-1: none)
        self.groups_last = 0  # s: the shared buckets' last refill
        self.log_at = 0  # s: the next hold logged

    def opened(self, cid, now, peer=None):
        """A new connection on `cid` through `peer` (the shell's; [3], if
        there, the listener's index): full buckets (Broker.connection_made)."""
        if cid >= len(self.last):
            for table in self.tokens + [self.last, self.hit, self.held]:
                table.append(0)
            self.user_of.append(-1)
            self.listener_of.append(-1)
        self.closed(cid)
        for i in range(3):
            self.tokens[i][cid] = self.rates[i]
        self.last[cid] = now
        self.hit[cid] = 0
        self.held[cid] = 0
        self.user_of[cid] = -1
        if self.listeners is not None:
            self.listener_of[cid] = self.listeners.slot(peer[3] if peer is not None and len(peer) > 3 else 0)

    def logged_in(self, broker, conn):
        """Its CONNECT was accepted: a named user takes from its user's bucket."""
        users = self.users
        if users is None or conn.user is None:
            return
        forgiven = users.forgiven
        self.user_of[conn.cid] = users.join(conn.user)
        if users.forgiven != forgiven:
            broker.log(30, "user rate table full (%d users): an idle user's debt was forgiven", (len(users.name),))

    def closed(self, cid):
        """The connection on `cid` ended (or its slot is reused)."""
        slot = self.user_of[cid]
        if slot >= 0:
            self.user_of[cid] = -1
            self.users.leave(slot)

    def charge(self, broker, conn, kind, amount, now):
        """Take `amount` of `kind` (0: a PUBLISH, 1: its bytes, 2: a
        SUBSCRIBE's filters) from the buckets of `conn`, its user and its
        listener; hold the client back once one of them is in debt."""
        if not self.on[kind] or conn.session.client_id in broker.routing.unthrottled:
            return  # (a bridge's local client: its upstream is paced there)
        cid = conn.cid
        cause = -1
        if self.rates[kind]:
            bucket = self.tokens[kind]
            left = bucket[cid] - amount
            bucket[cid] = left
            if left < 0:
                cause = kind
        slot = self.user_of[cid]
        if slot >= 0 and self.users.rates[kind]:
            bucket = self.users.tokens[kind]
            left = bucket[slot] - amount
            bucket[slot] = left
            if left < 0 and cause < 0:
                cause = 3 + kind
        slot = self.listener_of[cid]
        if slot >= 0 and self.listeners.rates[kind]:
            bucket = self.listeners.tokens[kind]
            left = bucket[slot] - amount
            bucket[slot] = left
            if left < 0 and cause < 0:
                cause = 6 + kind
        if cause >= 0:
            from common.broker.rate_hold import hold  # (in debt: rate_hold.py, loaded by the first debt)

            hold(self, broker, conn, cause, now)

    def in_debt(self, cid):
        """Whether any bucket `cid` takes from is below zero."""
        for i in range(3):
            if self.rates[i] and self.tokens[i][cid] < 0:
                return True
        slot = self.user_of[cid]
        if slot >= 0 and self.users.in_debt(slot):
            return True
        slot = self.listener_of[cid]
        return slot >= 0 and self.listeners.in_debt(slot)

    def tick(self, broker, now):
        """Refill the buckets (once a second); read again the clients out of
        debt; close those held back for rate_grace seconds (Broker.tick)."""
        passed = now - self.groups_last
        if passed > 0:
            self.groups_last = now
            for groups in (self.users, self.listeners):
                if groups is not None:
                    groups.refill_all(passed)
        throttled = broker.throttled
        released = False
        for conn in broker.connections.by_id:
            cid = conn.cid
            if conn.state != CONNECTED or cid >= len(self.last):
                continue
            passed = now - self.last[cid]
            if passed <= 0:
                continue
            self.last[cid] = now
            for i in range(3):
                rate = self.rates[i]
                if rate:
                    bucket = self.tokens[i]
                    t = bucket[cid] + rate * passed
                    bucket[cid] = t if t < rate else rate
            if not self.hit[cid]:
                self.held[cid] = 0  # a whole second within its rates
                continue
            if self.grace and now - self.held[cid] >= self.grace:
                from common.broker.rate_hold import close  # (loaded by its first hold)

                close(self, broker, conn, now)
                continue
            if self.in_debt(cid):
                continue  # still held back
            self.hit[cid] = 0
            if cid in throttled:
                throttled.remove(cid)
                released = True
        if released:
            broker.throttle_changed = True
        if throttled:
            # Clients held back here are not publishers waiting for a slow
            # subscriber: they must not start the broker's THROTTLE_MAX_S
            # escape (which reads everyone again and suspends the queue
            # throttle). Only a queue hold among them lets its clock run.
            for cid in throttled:
                if cid >= len(self.hit) or not self.hit[cid]:
                    return
            broker.throttled_since = now
