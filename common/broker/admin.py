# The administrator's view of a broker and the actions it may take: what the
# host's HTTP API (cpython_host/operations/http_server.py: the status page, `siskin ctl`)
# shows and does.
#
# Read-only listings walk the broker's tables and return plain tuples and
# dicts built fresh at each call (never on the message path). The actions
# go through the same paths as the protocol: a kicked client is failed as
# any other (v5 DISCONNECT 0x98 administrative action, its will published
# as for any close it did not ask for), a dropped session ends as an
# expired one does (destroy_session: its will, subscriptions and queue, and
# the store forgets it), a cleared retained message is an empty retained
# PUBLISH's work (Retained.store with no payload: the store forgets it).
#
# Only the host imports this module: a board does not pay for its code.

from common.broker import session_life
from common.broker.connection import CONNECTED
from common.broker.topics import validate_topic_filter
from common.mqtt import consts as C

KICKED = "disconnected by the administrator"


def clients(broker):
    """One dict per connected client, in connection id order."""
    out = []
    by_client = broker.stats.by_client  # the host's per-client figures, or None
    for conn in broker.connections.by_id:
        session = conn.session
        if conn.state != CONNECTED or session is None:
            continue
        peer = conn.peer
        cid = conn.cid
        out.append(
            {
                "client_id": session.client_id,
                "address": peer[0] if peer is not None else "",
                "protocol_level": conn.level,
                "keep_alive": conn.keep_alive,
                "user": conn.user,
                "inflight": len(session.inflight),
                "queued": session.queue.count,
                "queued_bytes": session.queued_bytes,
                "subscriptions": len(session.subs),
                # Wall time of its CONNECT, PUBLISH packets from it and to it (None: not counted).
                "connected_since": by_client.since[cid] if by_client is not None else None,
                "messages_in": by_client.received[cid] if by_client is not None else None,
                "messages_out": by_client.sent[cid] if by_client is not None else None,
            }
        )
    return out


def sessions(broker):
    """One dict per session (connected or not), sorted by client id."""
    out = []
    for client_id in sorted(broker.sessions.by_client_id):
        session = broker.sessions.by_client_id[client_id]
        out.append(
            {
                "client_id": client_id,
                "user": session.user or None,  # (None: anonymous, or restored without its owner)
                "connected": session.conn is not None,
                "persistent": session.expiry_interval != 0,
                "expires_at": session.expires_at,
                "inflight": len(session.inflight),
                "queued": session.queue.count,
                "queued_bytes": session.queued_bytes,
                "dropped": session.dropped,
                "subscriptions": sorted(session.subs),
            }
        )
    return out


def queues(broker):
    """(messages queued, their bytes (topic + payload), messages in flight) over every session."""
    queued = size = inflight = 0
    for session in broker.sessions.by_client_id.values():
        queued += session.queue.count
        size += session.queued_bytes
        inflight += len(session.inflight)
    return queued, size, inflight


def kick(broker, client_id, now):
    """Disconnect the client connected as `client_id` (v5: DISCONNECT 0x98).

    Its session lives on if it is persistent. False if no such client is connected."""
    session = broker.sessions.find(client_id)
    if session is None or session.conn is None or session.conn.state != CONNECTED:
        return False
    conn = session.conn
    sent = broker.fail(conn, C.RC_ADMINISTRATIVE_ACTION, now, text=KICKED)
    broker.log(20, "closing %s: %s; sent %s", (client_id, KICKED, sent))
    return True


def drop_session(broker, client_id, now):
    """End the session of `client_id`: its client is disconnected first (as
    kick()), then its subscriptions, queue and stored state are gone. False
    if there is no such session."""
    session = broker.sessions.find(client_id)
    if session is None:
        return False
    kick(broker, client_id, now)
    # The close detached it (a non-persistent one ended there): end what is left.
    if broker.sessions.find(client_id) is session:
        session_life.destroy_session(broker, session, now)
    broker.log(20, "session %s dropped by the administrator", (client_id,))
    return True


def _matching(broker, flt, now):
    # ValueError for a filter a SUBSCRIBE could not carry.
    if validate_topic_filter(flt):
        raise ValueError("not a valid topic filter: %r" % flt)
    found = []
    broker.routing.retained.matching(flt, found, now)
    return found


def retained(broker, flt, now):
    """(topic, payload bytes, QoS) of each live retained message matching
    `flt` ("#" does not match $SYS/ topics), sorted by topic; ValueError for
    an invalid filter."""
    found = _matching(broker, flt, now)
    out = [(msg.topic, len(msg.payload), msg.qos) for msg in found]
    out.sort()
    return out


def clear_retained(broker, flt, now):
    """Clear every retained message matching `flt`; how many were cleared."""
    store = broker.routing.retained
    found = _matching(broker, flt, now)
    for msg in found:
        store.store(msg.topic, b"", 0, None, 0)
    if found:
        broker.log(20, "%d retained message(s) matching %s cleared by the administrator", (len(found), flt))
    return len(found)
