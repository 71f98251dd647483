"""One MQTT-SN client's topic ids: normal ids the gateway assigns, the
predefined ids of the settings, and short topic names (MQTT-SN v1.2 §3, §6.5,
§6.7).

Theory of operation. A PUBLISH carries a two-octet topic id instead of a
name (§5.4.12); its TopicIdType says which of three namespaces the id is in:

- normal: assigned by the gateway for this client, by its REGISTER (§6.5) or
  a SUBSCRIBE to a name without wildcards (§6.9), or announced by the
  gateway's own REGISTER before it forwards a message the client has no id
  for (§6.10). Ids run 1..max_ids in the order given; v1.2 has no way to
  unregister, so they live as long as the client's session. A full table is
  refused with 0x01 "rejected: congestion" (as Paho's gateway answers: the
  client may try again after a clean session); the caller counts it.
- predefined: the same map for every client, from the settings (§6.7).
- short: the two characters of a two-character topic name, as the id
  itself (§3 "short topic name"); no table entry at all.

Ids 0x0000 and 0xFFFF are reserved (§5.3.11), so they are never assigned.
"""

from common.broker.topics import validate_topic_name
from common.mqttsn.consts import (
    RC_ACCEPTED,
    RC_CONGESTION,
    RC_INVALID_TOPIC_ID,
    TOPIC_NORMAL,
    TOPIC_PREDEFINED,
    TOPIC_SHORT,
)


def short_id(name):
    """The topic id of a short topic name (two characters, each one octet), else None."""
    if len(name) != 2:
        return None
    a = ord(name[0])
    b = ord(name[1])
    if a > 0xFF or b > 0xFF:
        return None
    return (a << 8) | b


def short_name(topic_id):
    """The short topic name a short topic id stands for (§3)."""
    return chr(topic_id >> 8) + chr(topic_id & 0xFF)


class TopicIds:
    """The normal ids of one client, and the lookups over all three kinds."""

    def __init__(self, max_ids, predefined):
        self.max_ids = max_ids
        self.predefined = predefined  # {id: name}, shared by every client (settings)
        self.names = []  # names[i] has normal id i + 1
        self.ids = {}  # name -> normal id

    def register(self, name):
        """(topic_id, return code) for a REGISTER of `name` or a SUBSCRIBE to it (§6.5)."""
        known = self.ids.get(name)
        if known is not None:
            return known, RC_ACCEPTED  # the same name gets the same id again
        if validate_topic_name(name):  # empty, a wildcard, U+0000
            return 0, RC_INVALID_TOPIC_ID
        if len(self.names) >= self.max_ids:
            return 0, RC_CONGESTION
        self.names.append(name)
        topic_id = len(self.names)
        self.ids[name] = topic_id
        return topic_id, RC_ACCEPTED

    def name_of(self, topic_id_type, topic_id):
        """The topic name a PUBLISH, SUBSCRIBE or UNSUBSCRIBE names; None: no
        such id (PUBACK 0x02 "rejected: invalid topic ID", §6.6)."""
        if topic_id_type == TOPIC_NORMAL:
            if 0 < topic_id <= len(self.names):
                return self.names[topic_id - 1]
            return None
        if topic_id_type == TOPIC_PREDEFINED:
            return self.predefined.get(topic_id)
        return short_name(topic_id)

    def id_for(self, name):
        """(topic id type, topic id) under which the gateway may send `name`
        to this client, or None: it needs a REGISTER first (§6.10). A normal
        id the client knows wins, then a predefined one, then a short name."""
        known = self.ids.get(name)
        if known is not None:
            return TOPIC_NORMAL, known
        for topic_id in self.predefined:  # a handful at most (settings)
            if self.predefined[topic_id] == name:
                return TOPIC_PREDEFINED, topic_id
        sid = short_id(name)
        if sid is not None:
            return TOPIC_SHORT, sid
        return None
