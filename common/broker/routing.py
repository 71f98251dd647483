# The routing part of the broker: where a message goes and what it is held in.
#
# It owns the subscription trie (normal subscriptions, and one SharedGroup
# per `$share/{name}/{filter}` in place of its members), the retained store,
# the message pool, the delivery pool and the scratch lists routing reuses
# so that routing a message allocates no list. handle_publish.route() walks
# it for each message; handle_subscribe adds and removes subscriptions
# through add() and remove().

from common.broker.delivery import DeliveryPool
from common.broker.pools import MessagePool
from common.broker.retained import Retained
from common.broker.session import SharedGroup
from common.broker.topics import SubscriptionTrie


class Routing:
    def __init__(self, settings, stats, listener):
        self.trie = SubscriptionTrie(settings.match_cache_bytes)
        self.groups = {}  # SharedGroup.key() -> SharedGroup
        self.messages = MessagePool(settings.max_messages, settings.prealloc, listener)
        # As many spare deliveries as messages: enough for a steady flow.
        self.deliveries = DeliveryPool(self.messages, settings.max_messages)
        self.retained = Retained(settings, self.messages, stats, listener)
        # Scratch reused by route(): the trie's matches, the sessions touched,
        # and the stamp that marks a session touched by the current message.
        self.matches = []
        self.touched = []
        self.stamp = 0
        # The client id whose full queue made route() refuse a message
        # (queue_full = refuse), for the publisher's reason string.
        self.refused_for = None
        # Set by deliver() when an online subscriber's queue passed its
        # high-water mark during this route(): the publisher is throttled.
        self.backlog = False

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
