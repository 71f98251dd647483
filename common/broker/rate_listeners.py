# The rate settings a listener sets for itself (a host's [[listener]] table:
# settings.LISTENER_RATES, on Limits.per_listener): its clients' own
# rate_messages, rate_bytes, rate_subscribes and its shared bucket's
# listener_rate_* (rate_connects: connect_rate.py). A key a listener does
# not set is [limits]'s; 0 is off on that listener. Loaded only when a
# listener sets one (never on a board: it has one listener, [limits]).
#
# Theory of operation. The buckets keep a rate per slot (buckets.py): a
# client's own slot gets its listener's rates when it connects (opened),
# a listener's shared slot when its table grows to it
# (rate_groups.ListenerBuckets). The rates are resolved once, at start,
# into one list per listener in the order of the hold causes
# (rate_hold.CAUSES: scope * 3 + kind).

from common.broker.login import listener_key
from common.broker.rate_hold import CAUSES


class ListenerRates:
    """Listener key -> its 9 rates (own, user, listener x PUBLISHes, bytes,
    filters): its own where set, else `rates` ([limits])."""

    def __init__(self, per_listener, rates):
        self.of = {}
        for key in per_listener:
            own = per_listener[key]
            self.of[key] = [own.get(CAUSES[i][0], rates[i]) for i in range(9)]

    def any_of(self, rates):
        """`rates` with each one that is 0 replaced by a listener's own
        where one sets it: what is on somewhere."""
        return [rates[i] or max([r[i] for r in self.of.values()]) for i in range(9)]

    def fastest(self, rate):
        """The most PUBLISHes/s a bucket earns: `rate` ([limits]') or a
        listener's own rate_messages or listener_rate_messages."""
        for r in self.of.values():
            rate = max(rate, r[0], r[6])
        return rate

    def set_own(self, own, cid, peer):
        """The own buckets of `cid` (own: buckets.Buckets) take the rates
        of `peer`'s listener (else [limits]')."""
        rates = self.of.get(listener_key(peer), own.default)
        for kind in range(3):
            own.rates[kind][cid] = rates[kind]

    def set_listener(self, buckets, key):
        """Listener `key`'s shared slot (rate_groups.ListenerBuckets) takes its listener_rate_*."""
        rates = self.of.get(key)
        if rates is not None:
            for kind in range(3):
                buckets.rates[kind][key] = rates[6 + kind]
