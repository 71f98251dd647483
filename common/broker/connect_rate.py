# CONNECTs per second per source address (setting rate_connects), beside
# the login back-off (secured.py), which only slows failed logins: a client
# that reconnects in a loop with good credentials costs a session takeover,
# a login check (a JWT's signature, an auth hook's request) and log lines
# each time. Loaded only when rate_connects is set.
#
# Theory of operation. One token bucket per source address (without its
# port), holding one second's worth (rate_connects) and refilled by
# rate_connects x the whole seconds passed, in a table of at most
# CONNECT_RATE_ENTRIES addresses. Each CONNECT takes a token; one that
# finds none is refused (a refused CONNECT takes nothing, so a client that
# retries once a second gets in). The refusal, in CONNACK, is v5 0x9F
# (Connection rate exceeded); 3.1.1 has no such code, and its 0x03 (Server
# unavailable) is the one that tells a client "not now, later" rather than
# "you are wrong" (0x04/0x05 would make clients drop their credentials or
# give up); a bare close would read as a network failure, which many
# clients retry at once. Counted (refused_connect_rate) and logged by the
# refusal's line (refusal.refuse_connect), which the log's limit bounds.
#
# The table: an entry whose bucket is full again is as good as none, so at
# the bound those are dropped first; if every address is still short of
# tokens, the one seen longest ago goes (its next CONNECT finds a full
# bucket: an attacker with more than CONNECT_RATE_ENTRIES addresses
# defeats this limit, not the table's memory).
#
# Per listener: a listener whose table sets its own rate_connects (the
# host's [[listener]]: settings.LISTENER_RATES) has its own table of
# addresses at that rate (0: off there); the others share the [limits] one.

from common.broker.login import listener_key, source_address
from common.mqtt import consts as C

CONNECT_RATE_ENTRIES = 256
CONNECTION_RATE_EXCEEDED = 0x9F  # v5 CONNACK reason


class ConnectRate:
    def __init__(self, rate, per_listener=None):
        self.rate = rate  # 0: off (a listener's own may be on)
        self.by_address = {}  # source address -> [tokens, the second of its last refill]
        # listener key -> the ConnectRate of a listener that sets its own
        # rate_connects (Limits.per_listener), None where it sets 0
        self.listeners = {}
        self.refused_on = {}  # listener key (a host's) -> CONNECTs refused there (/metrics)
        for key in per_listener or ():
            rate = per_listener[key].get("rate_connects")
            if rate is not None:
                self.listeners[key] = ConnectRate(rate) if rate else None

    def take(self, peer, now):
        """One CONNECT from `peer`: True if its address had a token (taken)."""
        address = source_address(peer)
        entry = self.by_address.get(address)
        if entry is None:
            if len(self.by_address) >= CONNECT_RATE_ENTRIES:
                self._make_room(now)
            entry = self.by_address[address] = [self.rate, now]
        else:
            tokens = entry[0] + self.rate * (now - entry[1])
            entry[0] = tokens if tokens < self.rate else self.rate
            entry[1] = now
        if entry[0] <= 0:
            return False
        entry[0] -= 1
        return True

    def _make_room(self, now):
        table = self.by_address
        oldest = None
        for address in list(table):
            entry = table[address]
            if entry[0] + self.rate * (now - entry[1]) >= self.rate:
                del table[address]  # full again: as good as no entry
            elif oldest is None or entry[1] < table[oldest][1]:
                oldest = address
        if len(table) >= CONNECT_RATE_ENTRIES:
            del table[oldest]

    def refusal(self, broker, conn, now):
        """handle_connect's check: None, or (reason, why) when the CONNECT's
        address is over rate_connects (its listener's own, where it sets one)."""
        limit = self
        key = listener_key(conn.peer)
        if key in self.listeners:
            limit = self.listeners[key]
        if limit is None or not limit.rate or limit.take(conn.peer, now):
            return None
        broker.stats.refused_connect_rate += 1
        if key is not None:
            self.refused_on[key] = self.refused_on.get(key, 0) + 1
        reason = CONNECTION_RATE_EXCEEDED if conn.level == C.LEVEL_5 else C.RC_SERVER_UNAVAILABLE
        return reason, "over rate_connects %d CONNECTs/s from %s (refused_connect_rate %d)" % (
            limit.rate,
            source_address(conn.peer) or "-",
            broker.stats.refused_connect_rate,
        )
