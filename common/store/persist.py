# Broker state <-> store records: the broker's persistence listener, and restore.
#
# Theory of operation. Persist is the listener (common/broker/listener.py) the
# shell hands to the Broker when persistence is on; the broker calls its
# hooks at every state change and never imports this module. Only
# persistent sessions (3.1.1 clean session 0, v5 Session Expiry > 0) and
# retained messages are stored. A session carries a `stored` flag, set
# here: while it is set, every change to the session's delivery state is
# written by the hooks below (the hooks ignore other sessions), and the
# shell's next take of output is preceded by a store sync
# (Broker.take_dirty), so nothing is acknowledged to a publisher before it
# is durable for every persistent session that must receive it. restore()
# rebuilds the broker through the public methods of its parts, as the
# handlers do; no handler is imported.
#
# Records (namespace byte + key -> packed list, see store.py):
#   S client_id         [level, expiry_interval, expires_wall, generation,
#                        next_packet_id, [inbound QoS 2 packet ids]]
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

from common.broker.delivery import QUEUED, RELEASED
from common.broker.listener import StateListener
from common.broker.pools import Ring
from common.broker.session import NEVER
from common.store.store import u64be

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


class Persist(StateListener):
    """Writes a broker's persistent state to a Store and reads it back."""

    durable = True

    def __init__(self, store):
        self.store = store
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
                [msg.topic, msg.payload, msg.qos, msg.retain, msg.props, self._wall(msg.expiry), None],
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
            [msg.payload, msg.qos, msg.props, self._wall(msg.expiry), None],
        )

    def retained_cleared(self, topic):
        self.store.delete(NS_RETAINED, topic.encode())

    # ---------------------------------------------------------- restore

    def restore(self, broker, now, wall):
        """Rebuild sessions, subscriptions, queues and retained messages."""
        self.offset = wall - now
        store = self.store
        messages = broker.routing.messages
        counts = {"sessions": 0, "subscriptions": 0, "messages": 0, "retained": 0, "dropped": 0}

        by_mid = {}
        for key, rec in store.items(NS_MESSAGE):
            mid = _from_be(key)
            topic, payload, qos, retain, props, expiry_wall = rec[:6]
            msg = messages.new(topic, payload, qos, retain, _props_in(props), self._core(expiry_wall, now, 0))
            if msg is None:
                counts["dropped"] += 1
                store.delete(NS_MESSAGE, key)
                continue
            msg.store_id = mid
            by_mid[mid] = msg
            if mid >= self.next_mid:
                self.next_mid = mid + 1

        for key, rec in store.items(NS_SESSION):
            self._restore_session(broker, key.decode(), rec, now, counts)

        for key, rec in store.items(NS_SUB):
            client_id, flt = key.split(b"\0", 1)
            session = broker.sessions.find(client_id.decode())
            if session is None:
                store.delete(NS_SUB, key)
                continue
            qos, no_local, rap, rh, sub_id = rec
            sub = broker.add_subscription(session, flt.decode())
            if sub is None:
                counts["dropped"] += 1
                store.delete(NS_SUB, key)
                continue
            sub.set_options(qos, no_local, rap, rh, sub_id)
            counts["subscriptions"] += 1

        self._restore_deliveries(broker, by_mid)

        for msg in by_mid.values():
            if msg.refs == 0:
                messages.pool.release(msg)  # no delivery refers to it
                store.delete(NS_MESSAGE, u64be(msg.store_id))
            else:
                counts["messages"] += 1

        retained = broker.routing.retained
        for key, rec in store.items(NS_RETAINED):
            payload, qos, props, expiry_wall = rec[:4]
            topic = key.decode()
            if retained.store(topic, payload, qos, _props_in(props), self._core(expiry_wall, now, 0), False):
                counts["retained"] += 1
            else:
                counts["dropped"] += 1
                store.delete(NS_RETAINED, key)
        counts["skipped"] = store.skipped
        store.sync()
        return counts

    def _restore_session(self, broker, client_id, rec, now, counts):
        level, expiry, expires_wall, generation, next_pid, qos2_in = rec
        if expiry != NEVER:
            expires_at = self._core(expires_wall, now, expiry) or now + expiry  # 0: it was connected
            if expires_at <= now:
                self.store.delete(NS_SESSION, client_id.encode())
                return  # expired while the broker was down; its records go below
        else:
            expires_at = 0
        session = broker.sessions.create(client_id, generation)
        if session is None:
            counts["dropped"] += 1
            self.store.delete(NS_SESSION, client_id.encode())
            return
        session.level = level
        session.expiry_interval = expiry
        session.expires_at = expires_at
        session.next_packet_id = next_pid
        session.qos2_in = set(qos2_in)
        session.stored = True
        counts["sessions"] += 1

    def _restore_deliveries(self, broker, by_mid):
        store = self.store
        routing = broker.routing
        per_session = {}
        for key, rec in store.items(NS_DELIVERY):
            client_id, seq = key.split(b"\0", 1)
            session = broker.sessions.find(client_id.decode())
            seq = _from_be(seq)
            if seq >= self.next_seq:
                self.next_seq = seq + 1
            mid, qos, retain, sub_ids, state, packet_id, share = rec
            msg = by_mid.get(mid) if state != RELEASED else None
            if session is None or (state != RELEASED and msg is None):
                store.delete(NS_DELIVERY, key)
                continue
            lst = per_session.get(session.client_id)
            if lst is None:
                lst = per_session[session.client_id] = []
            lst.append((seq, msg, qos, retain, sub_ids, state, packet_id, share))
        for client_id, items in per_session.items():
            session = broker.sessions.find(client_id)
            items.sort(key=lambda item: item[0])
            queued = []
            for seq, msg, qos, retain, sub_ids, state, packet_id, share in items:
                group = routing.group(share) if share is not None else None
                tag = (group, sub_ids) if group is not None else sub_ids
                d = routing.deliveries.new(msg, qos, retain, tag, group is not None)
                d.seq = seq
                if state == QUEUED:
                    queued.append(d)
                    continue
                d.set_sent(packet_id)
                if state == RELEASED:
                    d.set_released()
                session.inflight.append(d)
            queue = session.queue
            if len(queued) > queue.cap:
                # max_queued_messages was lowered since they were stored:
                # keep them all (they were acknowledged), in a ring that fits.
                queue = session.queue = Ring(len(queued), len(queued))
            for d in queued:
                queue.push(d)
                session.queued_bytes += d.msg.size()
