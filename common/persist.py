# Broker state <-> store records: the hooks the handlers call, and restore.
#
# Theory of operation. Only persistent sessions (3.1.1 clean session 0, v5
# Session Expiry > 0) and retained messages are stored. A session carries a
# `stored` flag: while it is set, every change to the session's delivery
# state is written through the hooks below, and the shell's next take of
# output is preceded by a store sync (Broker.take_dirty), so nothing is
# acknowledged to a publisher before it is durable for every persistent
# session that must receive it.
#
# Records (namespace byte + key -> packed list, see store.py):
#   S cid               [level, expiry_interval, expires_wall, generation,
#                        next_packet_id, [inbound QoS 2 packet ids]]
#   U cid \0 filter     [qos, no_local, retain_as_published, retain_handling, sub_id]
#   M mid(8)            [topic, payload, qos, retain, props, expiry_wall, origin]
#   D cid \0 seq(8)     [mid, qos, retain, sub_ids, state, packet_id, share key]
#   R topic             [payload, qos, props, expiry_wall, origin]
# A message is stored once (M) and referenced by every delivery (D) of it;
# its record is deleted when the last reference goes. `seq` orders a
# session's deliveries: restore rebuilds the inflight window and the queue in
# their original order. Delivery states: QUEUED (routed, not sent), SENT
# (PUBLISH sent, awaiting PUBACK/PUBREC, with its packet id), RELEASED (PUBREL
# sent, awaiting PUBCOMP; the message itself is gone).
#
# Times: the core's clock is the shell's monotonic seconds; records hold wall
# seconds (now + offset, the offset fixed by restore) so expiry keeps running
# across a restart. A stored time further away than its interval (the wall
# clock went back, or a board without a real-time clock) is clamped to now +
# interval.

from common import handle_subscribe, retained
from common.handle_connect import NEVER
from common.pools import Ring
from common.session import AWAIT_ACK, AWAIT_COMP, QUEUED, RELEASED, SENT, InflightEntry
from common.store import u64be

NS_SESSION = b"S"
NS_SUB = b"U"
NS_MESSAGE = b"M"
NS_DELIVERY = b"D"
NS_RETAINED = b"R"


def _from_be(b):
    n = 0
    for x in b:
        n = (n << 8) | x
    return n


def _props_in(value):
    """Properties as the codec holds them: a list of (id, value) tuples."""
    if not value:
        return None
    out = []
    for pid, v in value:
        out.append((pid, tuple(v) if isinstance(v, list) else v))
    return out


class Persist:
    """Writes a broker's persistent state to a Store and reads it back."""

    def __init__(self, broker, store):
        self.broker = broker
        self.store = store
        self.offset = 0  # wall seconds - core seconds
        self.next_mid = 1
        self.next_seq = 1
        broker.messages.on_free = self.message_freed

    # ---------------------------------------------------------- time

    def _wall(self, t):
        return t + self.offset if t else 0

    def _core(self, wall, now, interval):
        """Core time for a stored wall time; 0 stays 0; clamped to now + interval."""
        if not wall:
            return 0
        t = wall - self.offset
        if interval and t > now + interval:
            t = now + interval
        return t if t > 0 else 1

    # ---------------------------------------------------------- sessions

    def session_saved(self, session):
        """Write the session record; start storing a session that turned persistent."""
        if not session.expiry_interval:
            if session.stored:
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
            ],
        )

    def session_forgotten(self, session):
        """Delete every record of a session (destroyed, or no longer persistent)."""
        if not session.stored:
            return
        store = self.store
        cid = session.client_id.encode()
        for key in session.subs:
            store.delete(NS_SUB, cid + b"\0" + key.encode())
        for item in session.queue.items():
            self._drop_delivery(session, item[5])
        for entry in session.inflight:
            self._drop_delivery(session, entry.seq)
        store.delete(NS_SESSION, cid)
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
        if not msg.sid:
            mid = self.next_mid
            self.next_mid = mid + 1
            msg.sid = mid
            self.store.put(
                NS_MESSAGE,
                u64be(mid),
                [msg.topic, msg.payload, msg.qos, msg.retain, msg.props, self._wall(msg.expiry), msg.origin],
            )
        return msg.sid

    def _delivery_key(self, session, seq):
        return session.client_id.encode() + b"\0" + u64be(seq)

    def delivery_added(self, session, msg, qos, retain, sub_ids, group, state, packet_id):
        """A new delivery for a stored session; its sequence number (0 if not stored)."""
        if not session.stored:
            return 0
        seq = self.next_seq
        self.next_seq = seq + 1
        self._put_delivery(session, seq, self._message_id(msg), qos, retain, sub_ids, state, packet_id, group)
        return seq

    def delivery_sent(self, session, entry):
        """A queued delivery went out as `entry` (with its packet id)."""
        if session.stored and entry.seq:
            msg = entry.msg
            self._put_delivery(
                session, entry.seq, self._message_id(msg), entry.qos, entry.retain, entry.sub_ids, SENT, entry.packet_id, entry.group
            )

    def delivery_released(self, session, entry):
        """PUBREC received: the message is done with, PUBREL awaits PUBCOMP."""
        if session.stored and entry.seq:
            self._put_delivery(session, entry.seq, 0, 2, False, None, RELEASED, entry.packet_id, None)

    def delivery_done(self, session, seq):
        if session.stored:
            self._drop_delivery(session, seq)

    def _drop_delivery(self, session, seq):
        if seq:
            self.store.delete(NS_DELIVERY, self._delivery_key(session, seq))

    def _put_delivery(self, session, seq, mid, qos, retain, sub_ids, state, packet_id, group):
        share = None
        if group is not None:
            share = group.group + "/" + group.filter
        self.store.put(
            NS_DELIVERY,
            self._delivery_key(session, seq),
            [mid, qos, retain, sub_ids, state, packet_id, share],
        )

    def message_freed(self, msg):
        """MessagePool hook: the last reference to a stored message went."""
        if msg.sid:
            self.store.delete(NS_MESSAGE, u64be(msg.sid))

    # ---------------------------------------------------------- retained

    def retained_set(self, msg):
        self.store.put(
            NS_RETAINED,
            msg.topic.encode(),
            [msg.payload, msg.qos, msg.props, self._wall(msg.expiry), msg.origin],
        )

    def retained_cleared(self, topic):
        self.store.delete(NS_RETAINED, topic.encode())

    # ---------------------------------------------------------- restore

    def restore(self, now, wall):
        """Rebuild sessions, subscriptions, queues and retained messages."""
        self.offset = wall - now
        broker = self.broker
        store = self.store
        counts = {"sessions": 0, "subscriptions": 0, "messages": 0, "retained": 0, "dropped": 0}

        messages = {}
        for key, rec in store.items(NS_MESSAGE):
            mid = _from_be(key)
            topic, payload, qos, retain, props, expiry_wall, origin = rec
            msg = broker.messages.new(topic, payload, qos, retain, _props_in(props), self._core(expiry_wall, now, 0), origin)
            if msg is None:
                counts["dropped"] += 1
                store.delete(NS_MESSAGE, key)
                continue
            msg.sid = mid
            messages[mid] = msg
            if mid >= self.next_mid:
                self.next_mid = mid + 1

        for key, rec in store.items(NS_SESSION):
            self._restore_session(key.decode(), rec, now, counts)

        for key, rec in store.items(NS_SUB):
            cid, flt = key.split(b"\0", 1)
            session = broker.sessions.get(cid.decode())
            if session is None:
                store.delete(NS_SUB, key)
                continue
            qos, no_local, rap, rh, sub_id = rec
            sub = handle_subscribe.add_subscription(broker, session, flt.decode())
            if sub is None:
                counts["dropped"] += 1
                store.delete(NS_SUB, key)
                continue
            sub.qos = qos
            sub.no_local = no_local
            sub.retain_as_published = rap
            sub.retain_handling = rh
            sub.sub_id = sub_id
            counts["subscriptions"] += 1

        self._restore_deliveries(messages, counts)

        for msg in messages.values():
            if msg.refs == 0:
                broker.messages.pool.release(msg)  # no delivery refers to it
                store.delete(NS_MESSAGE, u64be(msg.sid))
            else:
                counts["messages"] += 1

        for key, rec in store.items(NS_RETAINED):
            payload, qos, props, expiry_wall, origin = rec
            topic = key.decode()
            if retained.store(broker, topic, payload, qos, _props_in(props), self._core(expiry_wall, now, 0), origin, False):
                counts["retained"] += 1
            else:
                counts["dropped"] += 1
                store.delete(NS_RETAINED, key)
        counts["skipped"] = store.skipped
        store.sync()
        return counts

    def _restore_session(self, client_id, rec, now, counts):
        broker = self.broker
        s = broker.settings
        level, expiry, expires_wall, generation, next_pid, qos2_in = rec
        if expiry != NEVER:
            expires_at = self._core(expires_wall, now, expiry) or now + expiry  # 0: it was connected
            if expires_at <= now:
                self.store.delete(NS_SESSION, client_id.encode())
                return  # expired while the broker was down; its records go below
        else:
            expires_at = 0
        session = broker.session_pool.alloc()
        if session is None:
            counts["dropped"] += 1
            self.store.delete(NS_SESSION, client_id.encode())
            return
        session.client_id = client_id
        session.level = level
        session.expiry_interval = expiry
        session.expires_at = expires_at
        session.generation = generation
        session.next_packet_id = next_pid
        session.qos2_in = set(qos2_in)
        session.stored = True
        session.setup_queue(s.max_queued_messages, s.max_queued_messages if s.prealloc else 4)
        broker.sessions[client_id] = session
        if generation > broker.generation:
            broker.generation = generation
        counts["sessions"] += 1

    def _restore_deliveries(self, messages, counts):
        broker = self.broker
        store = self.store
        per_session = {}
        for key, rec in store.items(NS_DELIVERY):
            cid, seq = key.split(b"\0", 1)
            session = broker.sessions.get(cid.decode())
            seq = _from_be(seq)
            if seq >= self.next_seq:
                self.next_seq = seq + 1
            mid, qos, retain, sub_ids, state, packet_id, share = rec
            msg = messages.get(mid) if state != RELEASED else None
            if session is None or (state != RELEASED and msg is None):
                store.delete(NS_DELIVERY, key)
                continue
            lst = per_session.get(session.client_id)
            if lst is None:
                lst = per_session[session.client_id] = []
            lst.append((seq, msg, qos, retain, sub_ids, state, packet_id, share))
        for client_id, items in per_session.items():
            session = broker.sessions[client_id]
            items.sort(key=lambda item: item[0])
            queued = []
            for seq, msg, qos, retain, sub_ids, state, packet_id, share in items:
                group = broker.shared.get(share) if share is not None else None
                if state == QUEUED:
                    queued.append((msg, qos, retain, sub_ids, group, seq))
                    continue
                entry = InflightEntry(packet_id, msg, qos, retain, sub_ids)
                entry.seq = seq
                entry.group = group
                if state == RELEASED:
                    entry.state = AWAIT_COMP
                else:
                    entry.state = AWAIT_ACK
                    broker.messages.hold(msg)
                session.inflight.append(entry)
            queue = session.queue
            if len(queued) > queue.cap:
                # max_queued_messages was lowered since they were stored:
                # keep them all (they were acknowledged), in a ring that fits.
                queue = session.queue = Ring(len(queued), len(queued))
            for item in queued:
                queue.push(item)
                session.queued_bytes += item[0].size
                broker.messages.hold(item[0])
