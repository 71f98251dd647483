# What goes out to one connection for the delivery engine: a PUBLISH
# encoded for that client, an ack. (A 3.1.1 QoS 0 frame forwarded as it
# came is route._forward's: nothing to encode.)
#
# Theory of operation. Every copy is appended to the client's output buffer
# (Broker.write). The copies of a message at one QoS (that of its first
# copy) with no property of their own share one encoded PUBLISH per
# protocol level (Message.wire4/wire5), patched in each output (flags,
# packet id: _write_shared). A v5 message's forwarded properties are
# encoded once, at its first v5 delivery (Message.props), and copied as
# bytes into every PUBLISH next to that delivery's own (expiry left,
# subscription identifiers, outbound topic alias). A PUBLISH the client's
# ACL does not let it read, or larger than its Maximum Packet Size, is not
# sent and counted.

from common.compat import const
from common.mqtt.packets import PubAck, encode_packet, encode_publish_parts, encode_publish_props, publish_first_byte
from common.mqtt.properties import encode_property_items

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_LEVEL_5 = const(5)
_PUBLISH_PID_SHIFT = const(6)
_PUBLISH_QOS_MASK = const(0x03)
_PUBREL = const(6)

# An ack's four bytes, patched in the output (send_ack).
ACK4 = b"\x00\x02\x00\x00"


def send_publish(broker, conn, msg, bits, sub_ids, now):
    """Encode and write one PUBLISH of `msg`; False if the client's size
    limit or its ACL forbids it.

    `bits`: its QoS, retain and DUP flags and packet id (consts.PUBLISH_*,
    as a Delivery keeps them: its other bits are not read). A v5 PUBLISH carries the message's forwarded
    properties, encoded once per message (Message.props), then this
    delivery's own: the expiry left, the subscription identifiers
    `sub_ids` [MQTT-3.3.4-3], the outbound topic alias.
    """
    acl = conn.acl
    if acl is not None and not acl.can_read(msg.topic):
        # A rule narrower than the filter granted (after a rule change, or a
        # session resumed by another user): not sent, counted.
        broker.stats.denied_delivery += 1
        return False
    qos = bits & _PUBLISH_QOS_MASK
    level = conn.level
    extras = conn.extras
    if extras is not None and extras.mount is not None:
        return _send_unmounted(broker, conn, msg, bits, sub_ids, now)
    if level != _LEVEL_5:
        data = msg.wire4
        if data is not None and (data[0] >> 1) & 3 == qos:
            return _write_shared(broker, conn, data, bits, len(msg.payload))
        data = encode_publish_parts(msg.topic, msg.payload, bits, level, None)
        if msg.wire4 is None:
            msg.wire4 = data  # the first copy's: the next ones patch it
        return _write_publish(broker, conn, data, qos, len(msg.payload))
    items = msg.props
    if items is not None and not isinstance(items, bytearray):
        items = msg.props = encode_property_items(items)  # the first v5 delivery
    extras = conn.extras
    alias_max = 0 if extras is None else extras.alias_max_out
    if not (msg.expiry or sub_ids or alias_max):
        data = msg.wire5
        if data is not None and (data[0] >> 1) & 3 == qos:
            return _write_shared(broker, conn, data, bits, len(msg.payload))
        if data is None:
            data = msg.wire5 = encode_publish_parts(msg.topic, msg.payload, bits, _LEVEL_5, items)
            return _write_publish(broker, conn, data, qos, len(msg.payload))
    return _send_own(broker, conn, msg, msg.topic, bits, sub_ids, now)


def _send_own(broker, conn, msg, topic, bits, sub_ids, now):
    """A v5 PUBLISH of its own (not the message's shared one) on `topic`."""
    items = msg.props
    if items is not None and not isinstance(items, bytearray):
        items = msg.props = encode_property_items(items)  # the first v5 delivery
    extras = conn.extras
    alias_max = 0 if extras is None else extras.alias_max_out
    qos = bits & _PUBLISH_QOS_MASK
    left = -1
    if msg.expiry:
        left = msg.expiry - now
        if left < 0:
            left = 0  # [MQTT-3.3.2-6] the interval less the time spent waiting
    alias = 0
    if alias_max:
        alias = _alias_out(extras, topic)
        if alias < 0:
            alias = -alias
            topic = ""  # the client knows the alias: the topic is left out
    data = encode_publish_props(topic, msg.payload, bits, items, left, sub_ids, alias)
    return _write_publish(broker, conn, data, qos, len(msg.payload))


def _send_unmounted(broker, conn, msg, bits, sub_ids, now):
    """send_publish to a client under a mount point (listener_policy.py): the
    topic without the prefix, encoded for this copy (the shared encoding
    names the whole topic). A topic outside the prefix is not sent (only
    its filters, all under the prefix, route to it)."""
    mount = conn.extras.mount
    topic = msg.topic
    if not topic.startswith(mount) or len(topic) == len(mount):
        broker.stats.denied_delivery += 1  # (a session resumed through another listener)
        return False
    topic = topic[len(mount) :]
    if conn.level != _LEVEL_5:
        data = encode_publish_parts(topic, msg.payload, bits, conn.level, None)
        return _write_publish(broker, conn, data, bits & _PUBLISH_QOS_MASK, len(msg.payload))
    return _send_own(broker, conn, msg, topic, bits, sub_ids, now)


def _write_shared(broker, conn, data, bits, size):
    """Write a message's shared PUBLISH `data` (Message.wire4/wire5: its
    first copy, encoded once), and patch this copy's flags and packet id in
    the client's output: every copy of a message at one QoS is the same
    bytes but for those."""
    qos = bits & _PUBLISH_QOS_MASK
    out = _write_publish(broker, conn, data, qos, size)
    if not out:
        return False
    n = len(out) - len(data)
    out[n] = publish_first_byte(bits)
    if qos:
        i = n + 2
        while out[i - 1] & 0x80:  # past the Remaining Length
            i += 1
        i += 2 + ((out[i] << 8) | out[i + 1])  # past the topic name
        pid = bits >> _PUBLISH_PID_SHIFT
        out[i] = pid >> 8
        out[i + 1] = pid & 0xFF
    return True


def _write_publish(broker, conn, data, qos, size):
    """Write one PUBLISH (`size`: its payload's bytes): the buffer it landed
    in (Broker.write), or False beyond the client's Maximum Packet Size."""
    st = broker.stats
    extras = conn.extras
    if extras is not None and extras.max_packet_out and len(data) > extras.max_packet_out:
        st.dropped_too_large += 1  # [MQTT-3.1.2-25]
        return False
    out = broker.output.write(conn, data, qos != 2)  # QoS 0/1: may leave before the store's sync
    st.messages_sent += 1
    st.sent_by_qos[qos] += 1
    st.publish_bytes_sent += size
    by_client = st.by_client
    if by_client is not None:
        by_client.sent[conn.cid] += 1
    return out


def _alias_out(extras, topic):
    """Outbound topic alias: 0 for none, a new alias (sent with the topic),
    or minus a known one (sent without the topic).

    The first PUBLISH on a topic carries the topic and a new alias; later ones
    carry only the alias. Aliases are never reassigned once the client's
    Topic Alias Maximum is used up [MQTT-3.3.2-8] [MQTT-3.3.2-10].
    """
    aliases = extras.aliases_out
    if aliases is None:
        aliases = extras.aliases_out = {}
    alias = aliases.get(topic)
    if alias is not None:
        return -alias
    if len(aliases) < extras.alias_max_out:
        alias = len(aliases) + 1
        aliases[topic] = alias
        return alias
    return 0


def send_ack(broker, conn, ptype, packet_id, reason, text=None):
    """PUBACK/PUBREC/PUBREL/PUBCOMP; `text` is a v5 Reason String, sent only
    when the client did not turn off Request Problem Information [MQTT-3.1.2-29]."""
    if text is not None and conn.extras is not None and not conn.extras.problem_info:
        text = None
    if conn.level == _LEVEL_5 and (reason or text is not None):
        pkt = PubAck(ptype, packet_id, reason, None)
        if text is not None:
            # Left out beyond the client's Maximum Packet Size [MQTT-3.4.2-2] [MQTT-3.5.2-2].
            from common.broker.refusal import with_reason_string  # (a refused PUBLISH's words only)

            broker.output.write(conn, with_reason_string(conn, pkt, text))
        else:
            broker.output.write(conn, encode_packet(pkt, _LEVEL_5))
        return
    # Four bytes, the same at both levels (v5 leaves out reason 0, 3.4.2.1):
    # written without a packet object.
    out = broker.output.write(conn, ACK4)
    n = len(out) - 4
    out[n] = (ptype << 4) | 0x02 if ptype == _PUBREL else ptype << 4
    out[n + 2] = packet_id >> 8
    out[n + 3] = packet_id & 0xFF
