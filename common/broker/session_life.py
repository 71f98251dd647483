# A session's life: taken by an accepted CONNECT (new, resumed, or taken
# over from a live connection), detached when its connection ends, kept
# orphaned until its expiry, destroyed; its will kept, delayed, published or
# dropped. handle_connect decides whether a CONNECT is accepted and answers
# it; everything here follows from that decision or from time passing
# (Broker.tick runs run_session_timers; the bridge and the admin API end a
# session with destroy_session).
#
# Theory of operation. A session's client id names it; a connection serves
# it while `session.conn` is that connection. take() finds the session of an
# accepted client id: a live connection serving it is closed first (v5:
# DISCONNECT 0x8E) and its will published as for any abnormal close
# [MQTT-3.1.4-2]; a clean start ends what was kept [MQTT-3.1.2-4]; else it
# is resumed, or a new one is made. attach() joins session and connection.
#
# When a connection ends, end() decides the fate of its will (published at
# once, delayed by the v5 Will Delay Interval, or discarded after a normal
# DISCONNECT) and of its session (destroyed, or kept orphaned until its
# expiry time, which becomes a session timer of the broker's). A will's own
# code (its checks, keeping and publishing it) is wills.py, loaded with the
# first will.

from common.broker import handle_subscribe, outbox, replay
from common.broker.connection import CONNECTED
from common.broker.session import NEVER
from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_RC_SESSION_TAKEN_OVER = const(0x8E)

# take()'s bits
TOOK_OVER = const(1)  # a live connection served the session: closed
PRESENT = const(2)  # the session was resumed (CONNACK's Session Present)

# ------------------------------------------------------------- taking it


def take(broker, conn, client_id, clean_start, now):
    """The session for an accepted CONNECT of `client_id` (a live connection
    serving it closed first, a kept one ended by a clean start), and bits:
    TOOK_OVER, PRESENT (resumed). The session is None when max_sessions
    leaves no room for a new one."""
    sessions = broker.sessions
    session = sessions.find(client_id)
    taken = 0
    if session is not None and session.conn is not None:
        taken = TOOK_OVER
        broker.fail(session.conn, _RC_SESSION_TAKEN_OVER, now)  # [MQTT-3.1.4-2]
        session = sessions.find(client_id)  # the close may have ended it
    if session is not None and clean_start:
        destroy_session(broker, session, now)  # [MQTT-3.1.2-6] [MQTT-3.1.2-4]
        session = None
    if session is None:
        session = sessions.create(client_id)
        if session is None:
            return None, taken
        session.user = conn.user
        return session, taken
    session.drop_will(broker.routing.messages)
    if conn.acl is not None:
        # Its owner or the rules may have changed since it was made.
        from common.broker import secured  # (loaded with the rules: security_files.set_security)

        secured.recheck(broker, conn, session, now)
        secured.drop_unreadable_inflight(broker, conn, session)
    return session, taken | PRESENT


def attach(broker, conn, session, expiry, will):
    """Join `session` and `conn` (now CONNECTED), with the CONNECT's session
    expiry interval and its will (None: none); the session is saved."""
    session.level = conn.level
    session.expiry_interval = expiry
    session.expires_at = 0
    session.conn = conn
    conn.session = session
    conn.state = CONNECTED
    by_client = broker.stats.by_client
    if by_client is not None:
        by_client.connected(conn.cid)
    if will is not None:
        session.will = will
    broker.listener.session_saved(session)


# ----------------------------------------------------- end of a connection


def end(broker, conn, now, publish_will=True):
    """The connection ends (any reason): its replay, its held QoS 2 ids, the
    publishers throttled for its queue (read again: it no longer drains),
    its will and its session; a will delay or session expiry it starts
    becomes the broker's session timer. `publish_will` False: it ends
    without its will (a normal DISCONNECT, Broker.close's callers)."""
    session = conn.session
    if session is not None and session.queue.count:
        broker.release_throttled()
    replay.end(broker, conn)
    if broker.qos2_late:
        broker.qos2_late.pop(conn.cid, None)
    _detach(broker, conn, now, publish_will)
    if session is not None:
        due = session.will_at
        if session.expires_at and (not due or session.expires_at < due):
            due = session.expires_at
        if due and (not broker.session_due or due < broker.session_due):
            broker.session_due = due


def _detach(broker, conn, now, publish_will):
    session = conn.session
    if session is None or session.conn is not conn:
        conn.session = None
        return
    session.conn = None
    conn.session = None
    by_client = broker.stats.by_client
    if by_client is not None:
        by_client.detached(session.client_id)
    if _has_shared(session):
        outbox.hand_over_shared(broker, session, now)
    if conn.state == CONNECTED and publish_will and session.will is not None:
        delay = session.will[1]
        if delay == 0 or session.expiry_interval == 0:
            from common.broker import wills  # (a will's code: loaded with the first will, wills.py)

            wills.publish(broker, session, now)  # [MQTT-3.1.2-8]
        else:
            if delay > session.expiry_interval:
                delay = session.expiry_interval
            session.will_at = now + delay
    elif session.will is not None and session.will_at == 0:
        session.drop_will(broker.routing.messages)  # [MQTT-3.1.2-10] normal DISCONNECT
    if session.expiry_interval == 0:
        destroy_session(broker, session, now)
        return
    if session.expiry_interval != NEVER:
        session.expires_at = now + session.expiry_interval
    broker.listener.session_saved(session)  # the disconnect time and a DISCONNECT's new expiry


def destroy_session(broker, session, now):
    """End a session: publish a pending will, free its subscriptions and queue."""
    if session.will is not None:
        if session.will_at:
            from common.broker import wills

            wills.publish(broker, session, now)  # the session ends before the delay
        else:
            session.drop_will(broker.routing.messages)
    if _has_shared(session):
        outbox.hand_over_shared(broker, session, now)
    handle_subscribe.remove_all(broker, session, now)
    outbox.release_session_messages(broker, session)
    broker.sessions.release(session)


def _has_shared(session):
    for sub in session.subs.values():
        if sub.share is not None:
            return True
    return False


def run_session_timers(broker, now):
    """Publish due delayed wills and expire orphaned sessions.

    Returns the earliest timer still pending (s), 0 for none; `now` when
    something fired (what is left of those sessions is found a second later).
    """
    due = None
    nearest = 0
    for session in broker.sessions.by_client_id.values():
        will_at = session.will_at
        expires_at = session.expires_at if session.conn is None else 0
        if (will_at and now > will_at) or (expires_at and now > expires_at):
            if due is None:
                due = []
            due.append(session)
            continue
        if expires_at and (not will_at or expires_at < will_at):
            will_at = expires_at
        if will_at and (not nearest or will_at < nearest):
            nearest = will_at
    if due is None:
        return nearest
    for session in due:
        if session.will_at and now > session.will_at:
            from common.broker import wills

            wills.publish(broker, session, now)
    for session in due:
        if session.expires_at and now > session.expires_at and session.conn is None:
            destroy_session(broker, session, now)
    return now
