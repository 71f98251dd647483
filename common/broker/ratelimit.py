# Rate limits per client, per user and per listener: PUBLISHes/s, PUBLISH
# bytes/s and subscribed filters/s inbound, as token buckets (settings
# rate_*, user_rate_*, listener_rate_*; 0 = that one off; all 0, the
# default: this module is never loaded and the broker's hooks cost one
# `is None` test). Connects/s per source address are connect_rate.py's.
#
# Theory of operation. Each bucket holds at most one second's worth (its
# rate) and earns rate x ms / 1000 tokens as the shell's ms clock runs
# (buckets.py: integers, the remainder carried, so the long-run rate is
# exact), in lists indexed by connection id made at start (nothing is
# allocated per packet). A packet is handled, then charged (a PUBLISH one
# message and its frame's bytes, a SUBSCRIBE its filters); a bucket that
# goes below zero is in debt, and its client is held back: put with the
# publishers the broker does not read (Broker.throttled, as the queue
# budgets do), so what it sends waits in its socket and TCP slows it.
#
# Charged after the read. Charging each PUBLISH to up to three buckets of
# two kinds cost CPython 6 % of the broker's CPU per message with limits on
# but not reached (docs/benchmarks.md). A read whose client's buckets all
# hold the most it can contain (its bytes, a quarter as many PUBLISHes) is
# charged once, after it (reading(), settle()): no bucket could go into
# debt within it, and no other client is read meanwhile, so the holds fall
# where they would and a shared bucket is exact for the next client.
#
# Release. A held client is read again as soon as its debts are paid, but
# not sooner than a step (RateLimits.step) after the last refill of the
# held ones: the broker names that moment in Broker.rate_due, the driver's
# tick() comes then, refills the held clients' buckets and reads those out
# of debt again. A released flooder so passes what it earned meanwhile, a
# slice of rate x step / 1000, not a second's worth at once; while the
# broker handles that slice the other clients' input waits, so the longest
# wait a flooder adds to a bystander's round trip is one slice (the share
# of time its allowed traffic takes is the same whatever the slice). The
# step is made at start from the fastest PUBLISH rate set (own, user's,
# listener's, a listener's own): SLICE x 1000 / rate ms, so that a release
# passes about SLICE PUBLISHes, within [STEP_MIN_MS, STEP_MAX_MS]. At
# 1000/s: 2 ms, 2 PUBLISHes a release (20 ms passed 20, ~180 us of a
# bystander's wait on a host); at the boards' 50-100/s: 20 ms, as before
# (there a debt of one PUBLISH takes 10-20 ms to pay: a shorter step would
# pass 1 PUBLISH instead of 2 for up to twice the wake-ups). The cost:
# wake-ups while someone is held, up to 1000 / step a second when debts
# are paid that fast (500 at 1000/s and more; 50 on a board). A bytes or
# filters limit alone keeps the 20 ms step (its slice is in bytes: the
# step does not follow it). The buckets of clients not held are refilled
# when they send (Broker.data_received: at most once a step, before the
# charge, so the time a bucket sat full is not credited to it afterwards)
# and once a second, so with nobody held back there is no wake-up more
# than before.
#
# Burst. The cap stays one second's worth: a client that was quiet may
# send that much at once (a device reporting a batch), and only then is
# it held back. A smaller cap would refuse such bursts without helping a
# bystander against a flooder, which is held back once its bucket is
# empty and from then on released a slice at a time.
#
# Shared buckets (rate_groups.py): user_rate_* take from one bucket per
# user name for all its connections, listener_rate_* from one per listener
# for all of its clients. A listener may set its own rate_* (its clients'
# buckets) and listener_rate_* (rate_listeners.py; 0: off there). A
# charge takes from the client's own bucket and from its user's and its
# listener's; the client is held back if any of them is in debt, and read
# again once none is. The hold is counted by the
# first bucket in debt (own, user, listener), per kind.
#
# A client held back at some moment of every second for `rate_grace`
# seconds in a row does not slow down: it is disconnected (v5 DISCONNECT 0x96 Message rate too
# high, 3.1.1 close), counted in closed_rate_limited. rate_grace 0: never
# (back-pressure only). Each hold is counted by cause (rate_held_messages,
# _bytes, _subscribes; rate_held_user_*, rate_held_listener_*), at most once
# a second per client (a flooder is released and held again each step: the
# figure does not depend on the step), and logged, at most one line a second. A bridge's
# local client (routing.unthrottled: what comes down from its upstream) is
# not limited here. Holding back, counting, logging and closing are
# rate_hold.py's, loaded when a client first goes into debt: a board whose
# clients keep to their rates keeps only the buckets' code.

from common.broker.buckets import Buckets
from common.broker.connection import CONNECTED
from common.compat import const, ticks_deadline, ticks_diff, ticks_sooner

# The step between two refills of the held clients' buckets (RateLimits.step):
# what a release passes at the fastest PUBLISH rate set (PUBLISHes), and
# the bounds (ms) that cap the wake-ups for it at 1000 / STEP_MIN_MS a
# second and keep slow rates at one refill per STEP_MAX_MS.
SLICE = const(2)
STEP_MIN_MS = const(2)
STEP_MAX_MS = const(20)


class RateLimits:
    def __init__(self, settings, slots):
        s = settings
        rates = [
            s.rate_messages, s.rate_bytes, s.rate_subscribes,
            s.user_rate_messages, s.user_rate_bytes, s.user_rate_subscribes,
            s.listener_rate_messages, s.listener_rate_bytes, s.listener_rate_subscribes,
        ]  # fmt: skip  (cause = scope * 3 + kind: rate_hold.CAUSES)
        # The listeners' own rates ([[listener]] tables), when one sets any.
        self.per_listener = None
        on = rates
        fastest = max(rates[0], rates[3], rates[6])  # PUBLISHes/s, the most a bucket earns
        if s.per_listener:
            from common.broker.rate_listeners import ListenerRates

            self.per_listener = ListenerRates(s.per_listener, rates)
            on = self.per_listener.any_of(rates)
            fastest = self.per_listener.fastest(fastest)
        # ms: a release passes about SLICE PUBLISHes at the fastest rate (theory above)
        self.step = min(max(SLICE * 1000 // fastest, STEP_MIN_MS), STEP_MAX_MS) if fastest else STEP_MAX_MS
        self.on = [on[k] or on[3 + k] or on[6 + k] for k in range(3)]  # kind -> any scope limits it
        # The shared buckets' module only when one is set (a board's
        # default sets per-client rates only: its heap holds no more).
        self.users = None
        self.listeners = None
        if on[3] or on[4] or on[5]:
            from common.broker.rate_groups import UserBuckets

            self.users = UserBuckets(rates[3:6], slots)
        if on[6] or on[7] or on[8]:
            from common.broker.rate_groups import ListenerBuckets

            self.listeners = ListenerBuckets(rates[6:9], self.per_listener)
        self.grace = settings.rate_grace
        self.own = Buckets(rates[0:3], slots)  # cid -> the client's own buckets
        self.tokens = self.own.tokens  # kind -> cid -> tokens
        self.hit = [0] * slots  # cid -> 1: held back now (in debt since its last release)
        self.recent = [0] * slots  # cid -> 1: held back at some moment since the last second
        self.held = [0] * slots  # cid -> held back in every second since this one (0: not)
        self.user_of = [-1] * slots  # cid -> its user's slot in users (-1: none)
        self.listener_of = [-1] * slots  # cid -> its listener's slot in listeners (-1: none)
        self.ms = 0  # the latest ms tick seen (a connect, a tick)
        self.stepped = 0  # ms tick: the held clients' last refill
        self.second = 0  # s: every bucket's last refill and grace check
        self.log_at = 0  # s: the next hold logged
        self.held_on = {}  # listener key (a host's) -> holds counted by cause (rate_hold.py; /metrics)
        # A read that every bucket of its client holds whole (reading()):
        # its PUBLISHes are charged after it (settle()), not one by one.
        self.free = -1  # cid of that read (-1: none; the rest are charged one by one)
        self.owed = 0  # its PUBLISHes' frame bytes so far
        self.counted = 0  # the broker's messages_received when it began

    def opened(self, cid, now, ms, peer=None):
        """A new connection on `cid` at (`now` s, `ms` ticks) through `peer`
        (the shell's; [3], if there, the listener's index): full buckets
        (Broker.connection_made)."""
        self.ms = ms
        if not self.second:
            self.stepped = ms  # (before the first tick)
        if cid >= len(self.hit):
            self.own.grow()
            for table in (self.hit, self.recent, self.held):
                table.append(0)
            self.user_of.append(-1)
            self.listener_of.append(-1)
        self.closed(cid)
        if self.per_listener is not None:
            self.per_listener.set_own(self.own, cid, peer)
        self.own.fill(cid, ms)
        self.hit[cid] = 0
        self.recent[cid] = 0
        self.held[cid] = 0
        self.user_of[cid] = -1
        if self.listeners is not None:
            self.listener_of[cid] = self.listeners.slot(peer[3] if peer is not None and len(peer) > 3 else 0, ms)

    def logged_in(self, broker, conn):
        """Its CONNECT was accepted: a named user takes from its user's bucket."""
        users = self.users
        if users is None or conn.user is None:
            return
        forgiven = users.forgiven
        self.user_of[conn.cid] = users.join(conn.user, self.ms)
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
        if not self.on[kind]:
            return
        session = conn.session  # (None: closed by the read that settle() charges)
        if session is not None and session.client_id in broker.routing.unthrottled:
            return  # (a bridge's local client: its upstream is paced there)
        cid = conn.cid
        cause = -1
        if self.own.rates[kind][cid]:
            bucket = self.tokens[kind]
            left = bucket[cid] - amount
            bucket[cid] = left
            if left < 0:
                cause = kind
        slot = self.user_of[cid]
        if slot >= 0 and self.users.rates[kind][slot]:
            bucket = self.users.tokens[kind]
            left = bucket[slot] - amount
            bucket[slot] = left
            if left < 0 and cause < 0:
                cause = 3 + kind
        slot = self.listener_of[cid]
        if slot >= 0 and self.listeners.rates[kind][slot]:
            bucket = self.listeners.tokens[kind]
            left = bucket[slot] - amount
            bucket[slot] = left
            if left < 0 and cause < 0:
                cause = 6 + kind
        if cause >= 0:
            from common.broker.rate_hold import hold  # (in debt: rate_hold.py, loaded by the first debt)

            hold(self, broker, conn, cause, now)

    def release_at(self, cid):
        """The ms tick at which held `cid` is read again: when every bucket
        it takes from is out of debt, and not before the next step."""
        due = ticks_deadline(self.stepped, self.step)
        for table, slot in ((self.own, cid), (self.users, self.user_of[cid]), (self.listeners, self.listener_of[cid])):
            if slot >= 0:
                paid = table.paid_at(slot)
                if paid and ticks_diff(paid, due) > 0:
                    due = paid
        return due

    def in_debt(self, cid):
        """Whether any bucket `cid` takes from is below zero."""
        if self.own.in_debt(cid):
            return True
        slot = self.user_of[cid]
        if slot >= 0 and self.users.in_debt(slot):
            return True
        slot = self.listener_of[cid]
        return slot >= 0 and self.listeners.in_debt(slot)

    def reading(self, broker, conn, ms, size):
        """Input from `conn` at tick `ms`, before it is charged: its buckets
        earn what they did since their last refill (at most once a step),
        so that the time a bucket sat full is not credited to it later.
        `size`: the bytes it may frame in this read. If every bucket it
        takes from holds that many bytes and a quarter as many PUBLISHes
        (the most it can be: a PUBLISH is 5 bytes or more), the read is
        charged after it (settle()): no bucket can go into debt before, and
        no other client is read meanwhile (its shared buckets stay exact
        for them), so the holds fall where they would, at a fraction of the
        cost per PUBLISH."""
        cid = conn.cid
        if ticks_diff(ms, self.own.last[cid]) >= self.step:
            self._refill(cid, ms)
        n = size >> 2
        user = self.user_of[cid]
        listener = self.listener_of[cid]
        if (
            self.free < 0
            and self.own.holds(cid, n, size)
            and (user < 0 or self.users.holds(user, n, size))
            and (listener < 0 or self.listeners.holds(listener, n, size))
        ):
            self.free = cid  # (a bridge's local client too: charge() then takes nothing)
            self.owed = 0
            self.counted = broker.stats.messages_received

    def settle(self, broker, conn, now):
        """The end of a read charged after it (reading()): its PUBLISHes
        (handle_publish counts each in messages_received) and their bytes."""
        self.free = -1
        n = broker.stats.messages_received - self.counted
        if n:
            self.charge(broker, conn, 0, n, now)
            self.charge(broker, conn, 1, self.owed, now)

    def _refill(self, cid, ms):
        # Every bucket `cid` takes from, up to tick `ms`.
        self.own.refill(cid, ms)
        slot = self.user_of[cid]
        if slot >= 0:
            self.users.refill(slot, ms)
        slot = self.listener_of[cid]
        if slot >= 0:
            self.listeners.refill(slot, ms)

    def tick(self, broker, now, ms):
        """Broker.tick: each step (self.step at least), refill the held
        clients' buckets and read again those out of debt; each second,
        refill every bucket and close the clients held back for rate_grace
        seconds. Broker.rate_due: the next release, 0 if nobody is held."""
        self.ms = ms
        second = now != self.second
        if second:
            self._each_second(broker, now, ms)
        throttled = broker.throttled
        if not throttled:
            broker.rate_due = 0
            self.stepped = ms  # (a hold from now on is released a step later at the soonest)
            return
        if not second and ticks_diff(ms, self.stepped) < self.step:
            return
        self.stepped = ms
        by_id = broker.connections.by_id
        released = False
        due = 0
        i = 0
        while i < len(throttled):
            cid = throttled[i]
            if cid >= len(self.hit) or not self.hit[cid] or by_id[cid].state != CONNECTED:
                i += 1  # (held for a slow subscriber's queue: not ours; or closing)
                continue
            self._refill(cid, ms)
            if self.in_debt(cid):
                self.recent[cid] = 1
                due = ticks_sooner(due, self.release_at(cid))
                i += 1
                continue
            self.hit[cid] = 0
            del throttled[i]
            released = True
        broker.rate_due = due
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

    def _each_second(self, broker, now, ms):
        # Refill the buckets of everyone (what they earned; only the held
        # wait for it, and they are refilled each step); close the clients
        # held back at some moment of every second for rate_grace seconds.
        # (Then tick() refills and releases the held as at each step: those
        # still in debt are `recent` again.)
        self.second = now
        for groups in (self.users, self.listeners):
            if groups is not None:
                groups.refill_all(ms)
        throttled = broker.throttled
        for conn in broker.connections.by_id:
            cid = conn.cid
            if conn.state != CONNECTED or cid >= len(self.hit):
                continue
            self.own.refill(cid, ms)
            if self.hit[cid] and cid not in throttled:
                self.hit[cid] = 0  # (read again by the broker: Broker.release_throttled)
            if not self.recent[cid]:
                self.held[cid] = 0  # a whole second within its rates
                continue
            self.recent[cid] = 0
            if self.grace and now - self.held[cid] >= self.grace:
                from common.broker.rate_hold import close  # (loaded by its first hold)

                close(self, broker, conn, now)
