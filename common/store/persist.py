# Broker state <-> store records: the broker's persistence listener, and restore.
#
# Theory of operation. Persist is the listener (common/broker/listener.py) the
# shell hands to the Broker when persistence is on; the broker calls its
# hooks at every state change and never imports this module. Only
# persistent sessions (3.1.1 clean session 0, v5 Session Expiry > 0) and
# retained messages are stored. A session carries a `stored` flag, set
# here: while it is set, every change to the session's delivery state is
# written by the hooks below (the hooks ignore other sessions), and no ack
# leaves before a store sync (Broker.next_dirty, take_output; a QoS 0/1
# delivery may: docs/persistence.md), so nothing is acknowledged to a
# publisher before it is durable for every persistent session that must
# receive it. restore()
# rebuilds the broker through the public methods of its parts, as the
# handlers do; no handler is imported. Its code runs once, at start-up: it
# lives in restore.py, loaded with the Persist and dropped after restore().
#
# Records (namespace byte + key -> packed list, see store.py):
#   S client_id         [level, expiry_interval, expires_wall, generation,
#                        next_packet_id, [inbound QoS 2 packet ids], owner]
#                       (owner: the user name, None = anonymous; records
#                       written before it existed end after the QoS 2 ids)
#   U client_id \0 filter [qos, no_local, retain_as_published, retain_handling, sub_id]
#   M mid(8)            [topic, payload, qos, retain, props, expiry_wall, None]
#   D client_id \0 seq(8) [mid, qos, retain, sub_ids, state, packet_id, share key]
#   R topic             [payload, qos, props, expiry_wall, None]
# (The last slot of M and R once held the publisher's client id, which
# nothing read: it is written as None and ignored on restore.)
# A message is stored once (M) and referenced by every delivery (D) of it;
# its record is deleted when the last reference goes. `seq` orders a
# session's deliveries: restore rebuilds the inflight window and the queue in
# their original order. Delivery states (common/broker/delivery.py): QUEUED
# (routed, not sent), SENT (PUBLISH sent, awaiting PUBACK/PUBREC, with its
# packet id), RELEASED (PUBREL sent, awaiting PUBCOMP; the message itself is
# gone).
#
# Times: the core's clock is the shell's monotonic seconds; records hold wall
# seconds (now + offset, the offset fixed by restore) so expiry keeps running
# across a restart. A stored time further away than its interval (the wall
# clock went back, or a board without a real-time clock) is clamped to now +
# interval.

from common.broker.delivery import RELEASED
from common.broker.listener import StateListener
from common.compat import unload
from common.mqtt.consts import PUBLISH
from common.mqtt.properties import decode_property_items
from common.store.store import u64be

# The module of the restore (loaded by storeboot, dropped after its one run).
RESTORE_MODULE = "common.store.restore"

NS_SESSION = b"S"
NS_SUB = b"U"
NS_MESSAGE = b"M"
NS_DELIVERY = b"D"
NS_RETAINED = b"R"


def _props_out(props):
    """Message.props as its records have always held them: a list of (id, value)."""
    if isinstance(props, bytearray):
        return decode_property_items(props, PUBLISH)  # encoded by a v5 delivery
    return props


class Persist(StateListener):
    """Writes a broker's persistent state to a Store and reads it back."""

    durable = True

    def __init__(self, store, restorer):
        """`restorer`: restore.restore (storeboot.new_broker hands it over,
        loaded before the broker takes its pools: a board that runs sources
        compiles it while the heap is still free); restore() runs it once."""
        self.store = store
        self.restorer = restorer
        self.offset = 0  # wall seconds - core seconds
        self.next_mid = 1
        self.next_seq = 1

    def pending(self):
        return self.store.dirty

    def syncs(self):
        return self.store.syncs

    def sync(self):
        self.store.sync()

    # ---------------------------------------------------------- time

    def _wall(self, t):
        return t + self.offset if t else 0

    # ---------------------------------------------------------- sessions

    def session_saved(self, session):
        """Write the session record; start storing a session that turned persistent."""
        if not session.expiry_interval:
            self.session_forgotten(session)
            return
        session.stored = True
        self.store.put(
            NS_SESSION,
            session.client_id.encode(),
            [
                session.level,
                session.expiry_interval,
                self._wall(session.expires_at),
                session.generation,
                session.next_packet_id,
                list(session.qos2_in),
                session.user,
            ],
        )

    def session_forgotten(self, session):
        """Delete every record of a session (destroyed, or no longer persistent)."""
        if not session.stored:
            return
        store = self.store
        client_id = session.client_id.encode()
        for key in session.subs:
            store.delete(NS_SUB, client_id + b"\0" + key.encode())
        for d in session.queue.items():
            self.delivery_done(session, d)
        for d in session.inflight:
            self.delivery_done(session, d)
        store.delete(NS_SESSION, client_id)
        session.stored = False

    def sub_saved(self, session, sub):
        if session.stored:
            self.store.put(
                NS_SUB,
                session.client_id.encode() + b"\0" + sub.key.encode(),
                [sub.qos, sub.no_local, sub.retain_as_published, sub.retain_handling, sub.sub_id],
            )

    def sub_removed(self, session, sub):
        if session.stored:
            self.store.delete(NS_SUB, session.client_id.encode() + b"\0" + sub.key.encode())

    # ---------------------------------------------------------- deliveries

    def _message_id(self, msg):
        if not msg.store_id:
            mid = self.next_mid
            self.next_mid = mid + 1
            msg.store_id = mid
            self.store.put(
                NS_MESSAGE,
                u64be(mid),
                [msg.topic, msg.payload, msg.qos, msg.retain, _props_out(msg.props), self._wall(msg.expiry), None],
            )
        return msg.store_id

    def _delivery_key(self, session, seq):
        return session.client_id.encode() + b"\0" + u64be(seq)

    def delivery_added(self, session, d):
        """A new delivery of a stored session gets its sequence number and record."""
        if session.stored:
            d.seq = self.next_seq
            self.next_seq += 1
            self._put_delivery(session, d)

    def delivery_sent(self, session, d):
        if session.stored and d.seq:
            self._put_delivery(session, d)

    def delivery_released(self, session, d):
        if session.stored and d.seq:
            self.store.put(
                NS_DELIVERY, self._delivery_key(session, d.seq), [0, 2, False, None, RELEASED, d.packet_id(), None]
            )

    def delivery_done(self, session, d):
        if session.stored and d.seq:
            self.store.delete(NS_DELIVERY, self._delivery_key(session, d.seq))

    def _put_delivery(self, session, d):
        group = d.shared_group()
        self.store.put(
            NS_DELIVERY,
            self._delivery_key(session, d.seq),
            [
                self._message_id(d.msg),
                d.qos(),
                d.retain(),
                d.sub_ids(),
                d.state(),
                d.packet_id(),
                group.key() if group is not None else None,
            ],
        )

    def message_freed(self, msg):
        """The last reference to a stored message went."""
        self.store.delete(NS_MESSAGE, u64be(msg.store_id))

    # ---------------------------------------------------------- retained

    def retained_set(self, msg):
        self.store.put(
            NS_RETAINED,
            msg.topic.encode(),
            [msg.payload, msg.qos, _props_out(msg.props), self._wall(msg.expiry), None],
        )

    def retained_cleared(self, topic):
        self.store.delete(NS_RETAINED, topic.encode())

    # ---------------------------------------------------------- restore

    def restore(self, broker, now, wall):
        """Rebuild sessions, subscriptions, queues and retained messages; counts."""
        # restore.py runs once: its function is dropped, and the module with
        # it (out of sys.modules and its package), so a board's heap does
        # not keep code it never runs again.
        restorer = self.restorer
        self.restorer = None
        try:
            return restorer(self, broker, now, wall)
        finally:
            unload(RESTORE_MODULE)
