# Broker state <-> store records: the broker's persistence listener, and restore.
#
# Theory of operation. Persist is the listener (common/broker/listener.py) the
# shell hands to the Broker when persistence is on; the broker calls its
# hooks at every state change and never imports this module. Only
# persistent sessions (3.1.1 clean session 0, v5 Session Expiry > 0) and
# retained messages are stored. A session carries a `stored` flag, set
# here: while it is set, every change to the session's delivery state is
# written by the hooks below (the hooks ignore other sessions), and no ack
# leaves before a store sync (common/broker/output.py; a QoS 0/1
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
#                       + [topic, payload, qos, retain, props, expiry_wall]
#                       when it holds its message inline (schema 2)
#   R topic             [payload, qos, props, expiry_wall, None]
# (The last slot of M and R once held the publisher's client id, which
# nothing read: it is written as None and ignored on restore.)
# A message is stored once and referenced by every delivery (D) of it: the
# first stored delivery holds it inline (Message.store_id < 0), so a
# message for one persistent session costs one record to keep and one
# tombstone when it is acknowledged; a second stored delivery writes its M
# record (store_id > 0), deleted when the last reference goes. A QoS 1
# delivery's move from the queue to the window is not written (delivery_sent). `seq` orders a
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
from common.compat import const, unload
from common.mqtt.properties import decode_property_items
from common.store.store import u64be

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_PUBLISH = const(3)
_PUBLISH_QOS_MASK = const(0x03)

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
        return decode_property_items(props, _PUBLISH)  # encoded by a v5 delivery
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

    def store_health(self):
        store = self.store
        return store.boot, store.skipped, store.errors

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

    def _new_mid(self):
        mid = self.next_mid
        self.next_mid = mid + 1
        return mid

    def message_record(self, msg):
        """The id of the message's M record, written now if it has none
        (store_id > 0: written; < 0: only inline in its first delivery's
        record; 0: not stored)."""
        mid = msg.store_id
        if mid > 0:
            return mid
        mid = -mid if mid else self._new_mid()
        msg.store_id = mid
        self.store.put(
            NS_MESSAGE,
            u64be(mid),
            [msg.topic, msg.payload, msg.qos, msg.retain, _props_out(msg.props), self._wall(msg.expiry), None],
        )
        return mid

    def _delivery_key(self, session, seq):
        return session.client_id.encode() + b"\0" + u64be(seq)

    def delivery_added(self, session, d):
        """A new delivery of a stored session gets its sequence number and
        record: the first of its message holds the message inline."""
        if session.stored:
            d.seq = self.next_seq
            self.next_seq += 1
            self._put_delivery(session, d, d.msg.store_id == 0)

    def delivery_sent(self, session, d):
        # QoS 1: not written. Its QUEUED record stands: after a crash the
        # delivery is sent again as new, a duplicate QoS 1 allows; a
        # shutdown writes the window as sent (window_saved). QoS 2: written
        # before its PUBLISH leaves (its output waits for the sync), so the
        # packet id a subscriber holds is one the broker remembers. A
        # message still inline (store_id < 0) is inline in this very
        # record: a second stored delivery would have written its M.
        if session.stored and d.seq and d.bits & _PUBLISH_QOS_MASK == 2:
            self._put_delivery(session, d, d.msg.store_id < 0)

    def window_saved(self, session):
        """Shutdown: the QoS 1 deliveries in a stored session's window
        written as sent (delivery_sent did not), so a restart resends them
        with DUP and their packet ids [MQTT-4.4.0-1]."""
        if session.stored:
            for d in session.inflight:
                if d.seq and d.bits & _PUBLISH_QOS_MASK == 1:
                    self._put_delivery(session, d, d.msg.store_id < 0)

    def delivery_released(self, session, d):
        if session.stored and d.seq:
            self.store.put(
                NS_DELIVERY, self._delivery_key(session, d.seq), [0, 2, False, None, RELEASED, d.packet_id(), None]
            )

    def delivery_done(self, session, d):
        if session.stored and d.seq:
            self.store.delete(NS_DELIVERY, self._delivery_key(session, d.seq))

    def _put_delivery(self, session, d, inline):
        # `inline`: the record holds the message too (its M fields after
        # the delivery's), and the message has no M record while it is the
        # only stored delivery of it: one record per message, not three.
        msg = d.msg
        group = d.shared_group()
        share = group.key() if group is not None else None
        if inline:
            mid = msg.store_id
            if not mid:
                mid = -self._new_mid()
                msg.store_id = mid
            rec = [
                -mid, d.qos(), d.retain(), d.sub_ids(), d.state(), d.packet_id(), share,
                msg.topic, msg.payload, msg.qos, msg.retain, _props_out(msg.props), self._wall(msg.expiry),
            ]
        else:
            rec = [self.message_record(msg), d.qos(), d.retain(), d.sub_ids(), d.state(), d.packet_id(), share]
        self.store.put(NS_DELIVERY, self._delivery_key(session, d.seq), rec)

    def message_freed(self, msg):
        """The last reference to a stored message went (an inline one goes
        with its delivery's record)."""
        if msg.store_id > 0:
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
