# What a client over its rate limits goes through (ratelimit.py keeps the
# buckets and charges them): held back with the throttled publishers until
# its debt is paid (ratelimit.py names the release), each hold counted by
# its cause (and, on a listener the shell names, for that listener:
# RateLimits.held_on) and logged (at most one line a second), and closed once held
# back at some moment of every second for rate_grace seconds in a row (v5 DISCONNECT 0x96
# Message rate too high, 3.1.1 close; closed_rate_limited). Loaded when a
# client first goes into debt: a board whose clients keep to their rates
# keeps only the buckets' code.

from common.broker.login import listener_key
from common.compat import const, ticks_sooner

_MESSAGE_RATE_TOO_HIGH = const(0x96)  # v5 DISCONNECT reason
KINDS = ("messages", "bytes", "subscribes")  # bucket kind (0: PUBLISHes, 1: their bytes, 2: filters)
WORDS = ("PUBLISHes/s", "PUBLISH bytes/s", "subscribed filters/s")
# Scope -> the prefix of its settings and counters, and whose bucket it is
# in the log. Cause = scope * 3 + kind.
SCOPES = (("", ""), ("user_", ", its user's"), ("listener_", ", its listener's"))
# Cause -> (setting, Stats counter of holds, words for the log)
CAUSES = tuple(
    (scope[0] + "rate_" + KINDS[k], "rate_held_" + scope[0] + KINDS[k], WORDS[k] + scope[1])
    for scope in SCOPES
    for k in range(3)
)


def hold(limits, broker, conn, cause, now):
    """Hold `conn` back (not read) for a bucket in debt (`cause`: scope * 3
    + kind) until its release (Broker.rate_due); count and log the hold at
    most once a second per client (a flooder is released and held again
    each step: the figure does not depend on the step)."""
    cid = conn.cid
    throttled = broker.throttled
    held_now = cid not in throttled  # (also after the broker released every publisher)
    if held_now:
        if not throttled:
            broker.throttled_since = now
        throttled.append(cid)
        broker.throttle_changed = True
    if held_now or not limits.hit[cid]:
        broker.rate_due = ticks_sooner(broker.rate_due, limits.release_at(cid))
    if limits.hit[cid]:
        return
    limits.hit[cid] = 1
    if limits.recent[cid]:
        return  # (held already in this second)
    limits.recent[cid] = 1
    if not limits.held[cid]:
        limits.held[cid] = now
    st = broker.stats
    setting, counter, words = CAUSES[cause]
    held = getattr(st, counter) + 1
    setattr(st, counter, held)
    key = listener_key(conn.peer)
    if key is not None:  # (a listener the shell names: counted for it too)
        counts = limits.held_on.get(key)
        if counts is None:
            counts = limits.held_on[key] = [0] * len(CAUSES)
        counts[cause] += 1
    if now >= limits.log_at:
        limits.log_at = now + 1
        # The rate of the bucket in debt: [limits]' or its listener's own (rate_listeners.py).
        scope = cause // 3
        slot = (cid, limits.user_of[cid], limits.listener_of[cid])[scope]
        rate = (limits.own, limits.users, limits.listeners)[scope].rates[cause % 3][slot]
        broker.log(
            30,
            "%s: over %s %d (%s): not read until it is back under (held back %d times for it)",
            (broker.client_name(conn), setting, rate, words, held),
        )


def close(limits, broker, conn, now):
    """Close `conn`, held back for rate_grace seconds in a row."""
    broker.stats.closed_rate_limited += 1
    name = broker.client_name(conn)
    sent = broker.fail(conn, _MESSAGE_RATE_TOO_HIGH, now, text="message rate too high")
    broker.log(
        30,
        "closing %s: over its rate limits for rate_grace %d s; sent %s (closed_rate_limited %d)",
        (name, limits.grace, sent, broker.stats.closed_rate_limited),
    )
