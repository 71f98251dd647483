# Rate limits per client: PUBLISHes/s, PUBLISH bytes/s and subscribed
# filters/s inbound, as token buckets (settings rate_messages, rate_bytes,
# rate_subscribes; 0 = that one off; all 0, the default: this module is
# never loaded and the broker's hooks cost one `is None` test).
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
# A client held back at every tick for `rate_grace` seconds in a row does
# not slow down: it is disconnected (v5 DISCONNECT 0x96 Message rate too
# high, 3.1.1 close), counted in closed_rate_limited. rate_grace 0: never
# (back-pressure only). Each hold is counted by cause (rate_held_messages,
# _bytes, _subscribes) and logged, at most one line a second. A bridge's
# local client (routing.unthrottled: what comes down from its upstream) is
# not limited here.

from common.broker.connection import CONNECTED
from common.compat import const

_MESSAGE_RATE_TOO_HIGH = const(0x96)  # v5 DISCONNECT reason
# Bucket index -> (setting, Stats counter of holds, words for the log)
CAUSES = (
    ("rate_messages", "rate_held_messages", "PUBLISHes/s"),
    ("rate_bytes", "rate_held_bytes", "PUBLISH bytes/s"),
    ("rate_subscribes", "rate_held_subscribes", "subscribed filters/s"),
)


class RateLimits:
    def __init__(self, settings, slots):
        self.rates = [getattr(settings, cause[0]) for cause in CAUSES]
        self.grace = settings.rate_grace
        self.tokens = [[rate] * slots for rate in self.rates]  # bucket -> cid -> tokens
        self.last = [0] * slots  # cid -> the second of its last refill
        self.hit = [0] * slots  # cid -> 1: went into debt since the last refill
        self.held = [0] * slots  # cid -> held back at every refill since this second (0: not)
        self.log_at = 0  # s: the next hold logged

    def opened(self, cid, now):
        """A new connection on `cid`: full buckets (Broker.connection_made)."""
        if cid >= len(self.last):
            for bucket in self.tokens:
                bucket.append(0)
            self.last.append(0)
            self.hit.append(0)
            self.held.append(0)
        for i in range(len(CAUSES)):
            self.tokens[i][cid] = self.rates[i]
        self.last[cid] = now
        self.hit[cid] = 0
        self.held[cid] = 0

    def charge(self, broker, conn, cause, amount, now):
        """Take `amount` from bucket `cause` of `conn` (0: a PUBLISH, 1: its
        bytes, 2: a SUBSCRIBE's filters); hold the client back once it is
        in debt."""
        rate = self.rates[cause]
        if not rate or conn.session.client_id in broker.routing.unthrottled:
            return  # (a bridge's local client: its upstream is paced there)
        cid = conn.cid
        bucket = self.tokens[cause]
        left = bucket[cid] - amount
        bucket[cid] = left
        if left >= 0:
            return
        throttled = broker.throttled
        if cid not in throttled:  # (also after the broker released every publisher)
            if not throttled:
                broker.throttled_since = now
            throttled.append(cid)
            broker.throttle_changed = True
        if self.hit[cid]:
            return
        self.hit[cid] = 1
        if not self.held[cid]:
            self.held[cid] = now
        st = broker.stats
        counter = CAUSES[cause][1]
        held = getattr(st, counter) + 1
        setattr(st, counter, held)
        if now >= self.log_at:
            self.log_at = now + 1
            broker.log(
                30,
                "%s: over %s %d (%s): not read until it is back under (held back %d times for it)",
                (broker.client_name(conn), CAUSES[cause][0], rate, CAUSES[cause][2], held),
            )

    def tick(self, broker, now):
        """Refill the buckets (once a second); read again the clients out of
        debt; close those held back for rate_grace seconds (Broker.tick)."""
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
            debt = False
            for i in range(len(CAUSES)):
                rate = self.rates[i]
                if rate:
                    bucket = self.tokens[i]
                    t = bucket[cid] + rate * passed
                    bucket[cid] = t if t < rate else rate
                    if t < 0:
                        debt = True
            if not self.hit[cid]:
                self.held[cid] = 0  # a whole second within its rates
                continue
            if self.grace and now - self.held[cid] >= self.grace:
                self._close(broker, conn, now)
                continue
            if debt:
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

    def _close(self, broker, conn, now):
        broker.stats.closed_rate_limited += 1
        name = broker.client_name(conn)
        sent = broker.fail(conn, _MESSAGE_RATE_TOO_HIGH, now, text="message rate too high")
        broker.log(
            30,
            "closing %s: over its rate limits for rate_grace %d s; sent %s (closed_rate_limited %d)",
            (name, self.grace, sent, broker.stats.closed_rate_limited),
        )
