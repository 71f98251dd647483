# The routing table of the broker (Broker.routing): what a message is routed
# by and held in. It decides nothing about a message; routing one is
# route.py's job, which reads this table.
#
# It owns the subscription trie (normal subscriptions, and one SharedGroup
# per `$share/{name}/{filter}` in place of its members), the retained store,
# the message pool, the delivery pool and the scratch lists routing reuses
# so that routing a message allocates no list. route.route() walks it for
# each message; handle_subscribe adds and removes subscriptions through
# add() and remove().

from common.broker.delivery import DeliveryPool
from common.broker.pools import MessagePool
from common.broker.retained import Retained
from common.broker.session import SharedGroup
from common.broker.topics import SubscriptionTrie
from common.compat import const

# Spare delivery records kept for reuse at most (a burst's beyond go back
# to the heap): enough for a steady flow, not a burst's worth on the host.
_SPARE_DELIVERIES = const(4096)
# An online subscriber's queue past half its limits, but at most this many
# messages or bytes, throttles the publisher feeding it (deliver()): with the
# host's large queues a burst still waits in the publisher's socket, not in RAM.
THROTTLE_COUNT = const(1000)
THROTTLE_BYTES = const(1048576)


class Routing:
    def __init__(self, settings, stats, listener):
        self.trie = SubscriptionTrie(settings.match_cache_bytes)
        self.groups = {}  # SharedGroup.key() -> SharedGroup
        self.messages = MessagePool(settings.max_messages, settings.prealloc, listener)
        # As many spare deliveries as messages, up to _SPARE_DELIVERIES.
        keep = settings.max_messages
        self.deliveries = DeliveryPool(self.messages, keep if keep < _SPARE_DELIVERIES else _SPARE_DELIVERIES)
        self.retained = Retained(settings, self.messages, stats, listener)
        # Scratch reused by route(): the trie's matches (for a topic the
        # broker's TopicCache does not hold), and the stamp that marks a
        # session touched by the current message (next_stamp).
        self.matches = []
        self.stamp = 0
        # Client ids whose backlog never throttles a publisher: the bridges'
        # local sessions (common/bridge/runner.py), whose queue is the
        # uplink's buffer, bounded by its own budget and queue_full.
        self.unthrottled = []
        # The high-water mark: half of the queue limits, capped.
        count = settings.max_queued_messages // 2
        self.high_count = count if count < THROTTLE_COUNT else THROTTLE_COUNT
        size = settings.max_queued_bytes // 2
        self.high_bytes = size if size < THROTTLE_BYTES else THROTTLE_BYTES
        # Bytes of all sessions' queues, as max_queued_total_bytes counts
        # them (outbox.QUEUED_COST), and when the next warning
        # about that budget may be logged (s).
        self.queued_total = 0
        self.total_log_at = 0

    def next_stamp(self):
        """A new value for Session.route_stamp: the sessions marked with it
        are those the current routing step has seen."""
        stamp = self.stamp + 1
        if stamp >= 0x3FFFFFFF:  # stay a small int on 32-bit ports
            stamp = 1
        self.stamp = stamp
        return stamp

    def add(self, sub, share_name):
        """Put a new subscription (filter set) in the trie, or in its shared group."""
        if share_name is None:
            self.trie.add(sub.filter, sub)
            return
        key = share_name + "/" + sub.filter
        group = self.groups.get(key)
        if group is None:
            group = SharedGroup(share_name, sub.filter)
            self.groups[key] = group
            self.trie.add(sub.filter, group)
        group.members.append(sub)
        sub.share = (group, [sub.sub_id] if sub.sub_id else None)

    def remove(self, sub):
        """Take a subscription out; its SharedGroup if it was the group's last member."""
        if sub.share is None:
            self.trie.remove(sub.filter, sub)
            return
        group = sub.share[0]
        group.members.remove(sub)
        if not group.members:
            self.trie.remove(group.filter, group)
            del self.groups[group.key()]

    def group(self, key):
        """The SharedGroup named `key` ("{name}/{filter}"), or None."""
        return self.groups.get(key)
