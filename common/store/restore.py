# Rebuilding the broker from the store's records (Persist.restore).
#
# Start-up only: Persist loads this module when it is made (before the
# broker's pools, while the heap is free) and restore() drops it after its
# one run, so a board's heap does not keep code it never runs again.
# The records are those described in persist.py; the state comes back
# through the public methods of the broker's parts, as the handlers use
# them (broker.sessions.create and Session.restored, broker.add_subscription,
# routing.retained.store, routing.messages.new, routing.deliveries.new, and
# outbox.restore_delivery, which alone fills a session's window and
# queue), in order: messages, sessions, subscriptions, then each
# session's inflight window and queue in their original order, then the
# retained messages.
#
# Memory: the records are read one at a time (store_open.read_items), and
# each is turned into the broker's objects before the next is read, so what
# a record needs in passing (its bytes, its unpacked list) is freed at once
# and its memory reused by the next: nothing transient piles up among the
# objects that stay. (Lists of every record, then of every delivery, kept
# the host's RSS 39 % above what the same state took before the restart:
# CPython keeps the partly used arenas of a peak.) The deliveries are read
# in key order, which is each session's sequence order (client id \0
# sequence, big-endian), so each goes straight to its session's window or
# queue. Messages with the same topic share one str, as live routing's
# TopicCache makes them (up to _SHARED_TOPICS topics).

from common.broker import outbox
from common.broker.delivery import QUEUED, RELEASED, SHARED
from common.broker.session import NEVER, OWNER_UNKNOWN
from common.compat import const
from common.mqtt.consts import PUBLISH_RETAIN
from common.store.persist import NS_DELIVERY, NS_MESSAGE, NS_RETAINED, NS_SESSION, NS_SUB
from common.store.store import u64be
from common.store.store_open import read_items

_SHARED_TOPICS = const(1024)  # distinct topic strs the restore shares between messages


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


def _core(persist, wall, now, interval):
    """Core time for a stored wall time; 0 stays 0; clamped to now + interval."""
    if not wall:
        return 0
    t = wall - persist.offset
    if interval and t > now + interval:
        t = now + interval
    return t if t > 0 else 1


# The fields each record's value must begin with, checked before use, so a
# record that passes its CRC (and GCM tag) but holds something else — written
# by a bug or edited by hand — is skipped, counted and logged like a damaged
# one instead of stopping the start with a traceback. i: int (or bool),
# n: int or None, s: str, b: bytes, l: list, L: list or None, *: anything.
_SHAPE_MESSAGE = "sbiiLi"
_SHAPE_SESSION = "iiiiil"
_SHAPE_SUB = "iiiin"
_SHAPE_DELIVERY = "iii*in*"
_SHAPE_RETAINED = "biLi"


def _fits(rec, shape):
    if not isinstance(rec, list) or len(rec) < len(shape):
        return False
    for i in range(len(shape)):
        t = shape[i]
        v = rec[i]
        if t == "*" or (v is None and (t == "n" or t == "L")):
            continue
        if t == "i" or t == "n":
            ok = isinstance(v, (int, bool))  # bool is no int on MicroPython
        elif t == "s":
            ok = isinstance(v, str)
        elif t == "b":
            ok = isinstance(v, bytes)
        else:
            ok = isinstance(v, list)
        if not ok:
            return False
    return True


def _usable(store, ns, key, rec, shape):
    """The record, checked: None (counted and logged) if its value or key is unusable."""
    if not _fits(rec, shape):
        store.skip(ns + key, "a value of the wrong shape: %r" % (rec,))
        return None
    if ns == NS_MESSAGE:
        return rec  # an 8-byte id
    text = key  # client ids and topics are UTF-8
    if ns == NS_SUB or ns == NS_DELIVERY:
        i = key.find(b"\0")
        if i < 0:
            store.skip(ns + key, "a key without its separator")
            return None
        if ns == NS_DELIVERY:
            text = key[:i]  # then an 8-byte sequence number
    try:
        text.decode()
    except UnicodeError:
        store.skip(ns + key, "a key that is not UTF-8")
        return None
    return rec


def restore(persist, broker, now, wall):
    """Rebuild sessions, subscriptions, queues and retained messages; counts."""
    persist.offset = wall - now
    store = persist.store
    store.read = 0
    store.total = len(store.backend)
    if store.monitor is not None:
        store.monitor.progress("restore", 0, store.total)
    messages = broker.routing.messages
    counts = {"sessions": 0, "subscriptions": 0, "messages": 0, "retained": 0, "dropped": 0}

    by_mid = {}
    topics = {}
    for key, rec in read_items(store, NS_MESSAGE):
        if _usable(store, NS_MESSAGE, key, rec, _SHAPE_MESSAGE) is None:
            continue
        mid = _from_be(key)
        msg = _message(persist, broker, rec, now, topics)
        if msg is None:
            counts["dropped"] += 1
            store.delete(NS_MESSAGE, key)
            continue
        msg.store_id = mid
        by_mid[mid] = msg
        if mid >= persist.next_mid:
            persist.next_mid = mid + 1

    for key, rec in read_items(store, NS_SESSION):
        if _usable(store, NS_SESSION, key, rec, _SHAPE_SESSION) is None:
            continue
        _restore_session(persist, broker, key.decode(), rec, now, counts)

    for key, rec in read_items(store, NS_SUB):
        if _usable(store, NS_SUB, key, rec, _SHAPE_SUB) is None:
            continue
        client_id, flt = key.split(b"\0", 1)
        session = broker.sessions.find(client_id.decode())
        if session is None:
            store.delete(NS_SUB, key)
            continue
        qos, no_local, rap, rh, sub_id = rec[:5]
        sub = broker.add_subscription(session, flt.decode())
        if sub is None:
            counts["dropped"] += 1
            store.delete(NS_SUB, key)
            continue
        sub.set_options(qos, no_local, rap, rh, sub_id)
        counts["subscriptions"] += 1

    _restore_deliveries(persist, broker, by_mid, topics, now, counts)  # (inline messages share the topics too)
    topics = None

    for msg in by_mid.values():
        if msg.refs == 0:
            messages.release(msg)  # no delivery refers to it
            if msg.store_id > 0:
                store.delete(NS_MESSAGE, u64be(msg.store_id))
        else:
            counts["messages"] += 1

    retained = broker.routing.retained
    for key, rec in read_items(store, NS_RETAINED):
        if _usable(store, NS_RETAINED, key, rec, _SHAPE_RETAINED) is None:
            continue
        payload, qos, props, expiry_wall = rec[:4]
        topic = key.decode()
        if retained.store(topic, payload, qos, _props_in(props), _core(persist, expiry_wall, now, 0), False):
            counts["retained"] += 1
        else:
            counts["dropped"] += 1
            store.delete(NS_RETAINED, key)
    counts["skipped"] = store.lost()
    store.sync()
    if store.monitor is not None:
        store.monitor.progress("restore", store.total, store.total)
    return counts


def _message(persist, broker, rec, now, topics):
    """A message from its fields (an M record's, or those after a
    delivery's own in a D record that holds it inline); None if the pool is
    full. Its topic is shared through `topics`."""
    topic, payload, qos, retain, props, expiry_wall = rec[:6]
    shared = topics.get(topic)
    if shared is not None:
        topic = shared
    elif len(topics) < _SHARED_TOPICS:
        topics[topic] = topic
    return broker.routing.messages.new(topic, payload, qos, retain, _props_in(props), _core(persist, expiry_wall, now, 0))


def _restore_session(persist, broker, client_id, rec, now, counts):
    level, expiry, expires_wall, generation, next_pid, qos2_in = rec[:6]
    if expiry != NEVER:
        expires_at = _core(persist, expires_wall, now, expiry) or now + expiry  # 0: it was connected
        if expires_at <= now:
            persist.store.delete(NS_SESSION, client_id.encode())
            return  # expired while the broker was down; its records go below
    else:
        expires_at = 0
    session = broker.sessions.create(client_id, generation)
    if session is None:
        counts["dropped"] += 1
        persist.store.delete(NS_SESSION, client_id.encode())
        return
    session.restored(level, expiry, expires_at, next_pid, qos2_in, rec[6] if len(rec) > 6 else OWNER_UNKNOWN)
    counts["sessions"] += 1


def _restore_deliveries(persist, broker, by_mid, topics, now, counts):
    """Each session's deliveries, in its sequence order (the key order), straight
    into its inflight window (sent ones) or its queue (the rest)."""
    store = persist.store
    routing = broker.routing
    client = None
    session = None
    for key, rec in read_items(store, NS_DELIVERY, True):
        if _usable(store, NS_DELIVERY, key, rec, _SHAPE_DELIVERY) is None:
            continue
        client_id, seq = key.split(b"\0", 1)
        if client_id != client:
            client = client_id
            session = broker.sessions.find(client_id.decode())
        seq = _from_be(seq)
        if seq >= persist.next_seq:
            persist.next_seq = seq + 1
        mid, qos, retain, sub_ids, state, packet_id, share = rec[:7]
        if mid >= persist.next_mid:
            persist.next_mid = mid + 1
        msg = None
        if state != RELEASED and session is not None:
            msg = by_mid.get(mid)
            if msg is None and len(rec) > 7 and _usable(store, NS_DELIVERY, key, rec[7:], _SHAPE_MESSAGE) is not None:
                # Schema 2: the message inline, its fields after the delivery's.
                msg = _message(persist, broker, rec[7:], now, topics)
                if msg is None:
                    counts["dropped"] += 1
                else:
                    msg.store_id = -mid  # no M record
                    by_mid[mid] = msg
            elif msg is not None and len(rec) == 7 and msg.store_id < 0:
                # Referred to by id but held inline by another record only
                # (its M record lost): it needs its M record to outlive that one.
                persist.message_record(msg)
        if session is None or (state != RELEASED and msg is None):
            store.delete(NS_DELIVERY, key)
            continue
        group = routing.group(share) if share is not None else None
        bits = qos | (PUBLISH_RETAIN if retain else 0)
        if group is not None:
            d = routing.deliveries.new(msg, bits | SHARED, (group, sub_ids))
        else:
            d = routing.deliveries.new(msg, bits, sub_ids)
        d.seq = seq
        if state != QUEUED:
            d.set_sent(packet_id)
            if state == RELEASED:
                d.set_released()
        outbox.restore_delivery(broker, session, d)
