# A bridge's notifications (Mosquitto's `notifications`): the state of its
# link as a retained "1" (connected) or "0" (not) on one topic, by default
# $SYS/broker/connection/<upstream client id>/state, here and upstream.
# Upstream, the CONNECT carries a will of "0" (QoS 1, retained), so the
# upstream broker itself says "0" when the link is cut; "1" follows each
# CONNACK (QoS 0, retained, written at once: no packet id taken from the
# local session's, and not held back with the queue); a clean stop says "0"
# before its DISCONNECT (which discards the will). Here, the broker
# publishes the value (QoS 1, retained) at each change (link.py).

from common.bridge.profiles import client_id_of

CONNECTED_PAYLOAD = b"1"
DOWN_PAYLOAD = b"0"


def topic_of(settings):
    """notification_topic, or Mosquitto's default: with the upstream client id."""
    return settings.notification_topic or "$SYS/broker/connection/" + client_id_of(settings) + "/state"


class Notifier:
    def __init__(self, settings, up):
        """`settings`: the bridge's (its topic: topic_of; notifications_local_only);
        `up`: its upstream client, given its will."""
        self.topic = topic_of(settings)
        self.upstream = not settings.notifications_local_only
        self.shown = None  # the payload published here last (None: none yet)
        if self.upstream:
            up.will = (self.topic, DOWN_PAYLOAD, 1, True)

    def tell_upstream(self, up, connected):
        """ "1" after the CONNACK, "0" before a clean DISCONNECT."""
        if self.upstream:
            up.publish(self.topic, CONNECTED_PAYLOAD if connected else DOWN_PAYLOAD, 0, True)

    def due_here(self, connected):
        """The payload to publish here now, or None (published already)."""
        payload = CONNECTED_PAYLOAD if connected else DOWN_PAYLOAD
        if payload == self.shown:
            return None
        self.shown = payload
        return payload
