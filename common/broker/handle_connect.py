# CONNECT, DISCONNECT and AUTH: whether a client is let in, and the answer.
# The AUTH exchange itself (v5 enhanced authentication) is enhanced_auth.py,
# loaded only with a configured method; here are its refusals without one.
# What follows from an accepted CONNECT (the session taken, resumed or made,
# its will, its end) is session_life.py.
#
# Theory of operation. accept() runs the checks of CONNECT_CHECKS in the
# order of the spec's statements. A check only judges: it answers a refusal
# (a CONNACK with the level's code, then close), _WAIT (an AUTH exchange
# must run first), or None, and what it found (the user, the client id, the
# ACL rules) goes into a Found that the checks after it read; nothing of
# the connection changes until every check passed, when _apply() sets it in
# one step. Then the session is taken (session_life.take/attach) and the
# CONNECT answered (_answer: CONNACK, the log line, what a resumed session
# is owed).

from common.broker import login, outbox, session_life
from common.broker.connection import NEW, mount_of
from common.broker.session import NEVER, OWNER_UNKNOWN
from common.compat import const
from common.mqtt.errors import ProtocolError
from common.mqtt.packets import Connack, encode_packet, prop_get

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_CONNACK_ACCEPTED = const(0x00)
_LEVEL_31 = const(3)
_LEVEL_311 = const(4)
_LEVEL_5 = const(5)
_PROP_AUTHENTICATION_METHOD = const(0x15)
_PROP_MAXIMUM_PACKET_SIZE = const(0x27)
_PROP_SESSION_EXPIRY_INTERVAL = const(0x11)
_RC_BAD_AUTHENTICATION_METHOD = const(0x8C)
_RC_CLIENT_IDENTIFIER_NOT_VALID = const(0x85)
_RC_DISCONNECT_WITH_WILL = const(0x04)
_RC_NOT_AUTHORIZED = const(0x87)
_RC_QUOTA_EXCEEDED = const(0x97)
_RC_SERVER_BUSY = const(0x89)
_RC_SERVER_UNAVAILABLE = const(0x88)
_RC_SUCCESS = const(0x00)
_RC_UNSUPPORTED_PROTOCOL_VERSION = const(0x84)


def send_connack(broker, conn, session_present, props):
    """Send the CONNACK of an accepted CONNECT (v5: with `props`)."""
    if conn.level == _LEVEL_5:
        broker.output.write(conn, encode_packet(Connack(session_present, _RC_SUCCESS, props), _LEVEL_5))
    else:
        # 3.1.1: four fixed bytes (one per connection in a connect storm).
        broker.output.write(conn, bytes((0x20, 2, 1 if session_present else 0, _CONNACK_ACCEPTED)))


def refuse(broker, conn, reason, now, why):
    """Refuse the CONNECT with `reason` for `why` (refusal.refuse_connect:
    loaded by the first refusal)."""
    from common.broker.refusal import refuse_connect

    refuse_connect(broker, conn, reason, now, why)


# ------------------------------------------------------------------ CONNECT


def handle_connect(broker, conn, pkt, now):
    """A CONNECT (the dispatch table lets one through only before CONNACK)."""
    if conn.connect_pending():
        # A CONNECT while the first waits for its AUTH exchange [MQTT-3.1.0-1].
        broker.close(conn, now, publish_will=False)
        return
    accept(broker, conn, pkt, now, None)


# A check's answer that stops the CONNECT without a refusal: an AUTH
# exchange runs first (its method in Found.method).
_WAIT = (0, None)


class Found:
    """What the checks of one CONNECT found, for the checks after them and
    for _apply(): the client's user (None: anonymous), its client id (one of
    the broker's if it sent none), its ACL rules, the enhanced
    authentication method to start, a restored session it claims."""

    def __init__(self, conn, pkt):
        self.cid = conn.cid
        self.user = conn.user  # (a SCRAM exchange's, or None)
        self.client_id = pkt.client_id
        self.assigned = False
        self.acl = None
        self.method = None
        self.claim = None
        # What a JWT or an auth hook's allow brought (login.py): its rules
        # (a granted.shape()), the token's expiry, which of the two.
        self.granted = None
        self.expiry = None
        self.source = None


def _check_level(broker, conn, pkt, found, now):
    if pkt.level == _LEVEL_31 and not broker.settings.allow_mqtt31:
        return _RC_UNSUPPORTED_PROTOCOL_VERSION, "MQTT 3.1 (MQIsdp) with allow_mqtt31 false"  # [MQTT-3.1.2-2]
    return None


def _check_capacity(broker, conn, pkt, found, now):
    if conn.extras is not None and conn.extras.refuse_reason:
        # Accepted beyond max_connections only to say so.
        reason = _RC_SERVER_BUSY if conn.level == _LEVEL_5 else _RC_SERVER_UNAVAILABLE
        return reason, "over max_connections %d" % broker.settings.max_connections
    return None


def _check_connect_rate(broker, conn, pkt, found, now):
    # Before any login work: an address reconnecting in a loop (connect_rate.py).
    if broker.connect_rate is None:
        return None
    return broker.connect_rate.refusal(broker, conn, now)


def _check_auth_method(broker, conn, pkt, found, now):
    # v5 enhanced authentication (4.12): a method that is not configured is
    # refused; a configured one runs its exchange first (enhanced_auth.py),
    # and the CONNECT comes back here once it succeeded (the method set).
    if conn.level != _LEVEL_5 or (conn.extras is not None and conn.extras.method is not None):
        return None
    name = prop_get(pkt.props, _PROP_AUTHENTICATION_METHOD, None)
    if name is None:
        return None
    method = broker.auth_methods.get(name)
    if method is None:
        return _RC_BAD_AUTHENTICATION_METHOD, ("authentication method '%s' not configured", (name,))
    found.method = method
    return _WAIT


def _check_login(broker, conn, pkt, found, now):
    # Who the client is, and whether it may connect (login.py): 3.1.1
    # CONNACK 0x04 / v5 0x86 for a bad user name or password, 0x05 / 0x87
    # for a client that is not allowed in.
    return login.login(broker, conn.peer, pkt, found, now) or None


def _check_client_id(broker, conn, pkt, found, now):
    # [MQTT-3.1.3-*]. An empty one is given an id of the broker's here, so
    # that the checks after this one (the ACL's rules) see the id it will have.
    client_id = pkt.client_id
    if not client_id:
        if conn.level != _LEVEL_5 and not pkt.clean_start:
            return _RC_CLIENT_IDENTIFIER_NOT_VALID, "empty client id without clean session"  # [MQTT-3.1.3-8]
        found.client_id = _generate_client_id(broker)  # [MQTT-3.1.3-6]
        found.assigned = conn.level == _LEVEL_5  # told in CONNACK (Assigned Client Identifier)
        return None
    limit = broker.settings.max_client_id_length
    if len(client_id) > limit:
        why = "client id of %d characters over max_client_id_length %d" % (len(client_id), limit)
        return _RC_CLIENT_IDENTIFIER_NOT_VALID, why  # [MQTT-3.1.3-9]
    return None


def _check_keep_alive(broker, conn, pkt, found, now):
    # The keep-alive cap: v5 is told the server's value (CONNACK); 3.1.1 has
    # no way to be told, so it is refused as mosquitto does.
    cap = broker.settings.max_keepalive
    keep_alive = pkt.keep_alive
    if conn.level != _LEVEL_5 and cap and (keep_alive == 0 or keep_alive > cap):
        return _RC_CLIENT_IDENTIFIER_NOT_VALID, "keep-alive %d s outside max_keepalive %d s (0 = none)" % (keep_alive, cap)
    return None


def _check_owner(broker, conn, pkt, found, now):
    # Another user's session (live or kept) is not this client's to take; a
    # restored one without its owner is claimed by the first who resumes it.
    session = broker.sessions.find(found.client_id)
    if session is not None:
        if session.user is OWNER_UNKNOWN:
            found.claim = session
        elif session.user != found.user:
            from common.broker.refusal import owner_refusal  # (its words: refusal.py)

            return _RC_NOT_AUTHORIZED, owner_refusal(broker, found.user, conn.peer, session, found.client_id)
    # Its ACL rules, before the will is judged by them; a resumed session's
    # subscriptions are re-checked when it is taken.
    brought = (found.granted, found.source.RULES_FROM) if found.granted is not None else None
    found.acl = login.rules_for(broker, found.user, conn.peer, found.client_id, brought)
    return None


def _check_will(broker, conn, pkt, found, now):
    # Judged as the same live PUBLISH would be (wills.py: loaded with the first will).
    if pkt.will_topic is None:
        return None
    from common.broker import wills

    return wills.refusal(broker, conn, pkt, found)


# The checks of a CONNECT, in this order (that of the spec's statements,
# and each reads what the ones before it found: the user for the owner,
# the client id and rules for the will). Each answers None (go on),
# (reason, why) for refuse(), or _WAIT; none changes the connection.
CONNECT_CHECKS = (
    _check_level,
    _check_capacity,
    _check_connect_rate,
    _check_auth_method,
    _check_login,
    _check_client_id,
    _check_keep_alive,
    _check_owner,
    _check_will,
)


def _apply(conn, pkt, found):
    # What the checks found, set in one step once they all passed.
    conn.user = found.user
    conn.acl = found.acl
    pkt.client_id = found.client_id
    if found.claim is not None:
        found.claim.user = found.user


def accept(broker, conn, pkt, now, auth_out):
    """Check and accept a CONNECT; `auth_out` (bytes) is set once enhanced
    authentication succeeded (enhanced_auth.py), else None."""
    level = pkt.level
    conn.level = _LEVEL_5 if level == _LEVEL_5 else _LEVEL_311
    if level == _LEVEL_5:
        # Before any refusal: its Reason String must fit [MQTT-3.1.2-25].
        limit = prop_get(pkt.props, _PROP_MAXIMUM_PACKET_SIZE, 0)
        if limit:
            conn.extra().max_packet_out = limit
    found = Found(conn, pkt)
    for check in CONNECT_CHECKS:
        verdict = check(broker, conn, pkt, found, now)
        if verdict is not None:
            break
    if verdict is not None and not verdict[0]:
        # It waits: for its AUTH exchange (found.method), or for the answer
        # of an auth service outside (external_auth.py), kept meanwhile.
        if found.method is None:
            conn.extra().pending = pkt
            return
        # (Loaded with the methods by the Broker: no import from the network.)
        from common.broker import enhanced_auth

        _exchanged(broker, conn, pkt, now, enhanced_auth.start(broker, conn, pkt, found.method))
        return
    if verdict is not None:
        refuse(broker, conn, verdict[0], now, verdict[1])
        return
    _apply(conn, pkt, found)
    if broker.rates is not None:
        broker.rates.logged_in(broker, conn)  # (its user's shared bucket)
    for extra in (broker.jwt, broker.hook):
        if extra is not None:
            extra.attach(conn, found)  # (its expiry, its rules at a reload)
    _take_session(broker, conn, pkt, now, found.assigned, auth_out)


def _take_session(broker, conn, pkt, now, assigned, auth_out):
    # The accepted CONNECT's session (session_life), then the answer. The
    # will is kept (a message slab held) before CONNACK acknowledges it.
    s = broker.settings
    v5 = pkt.level == _LEVEL_5
    will = None
    if pkt.will_topic is not None:
        from common.broker import wills  # (loaded by _check_will)

        will = wills.keep(broker, pkt, mount_of(conn))
        if will is None:
            broker.stats.dropped_no_slab += 1
            why = "message store full (max_messages %d): the will cannot be kept" % s.max_messages
            refuse(broker, conn, _RC_QUOTA_EXCEEDED if v5 else _RC_SERVER_UNAVAILABLE, now, why)
            return
    if v5:
        expiry = prop_get(pkt.props, _PROP_SESSION_EXPIRY_INTERVAL, 0)
        if expiry > s.max_session_expiry:
            expiry = s.max_session_expiry
    elif pkt.clean_start:
        expiry = 0
    else:
        expiry = s.persistent_session_expiry or NEVER
    session, taken = session_life.take(broker, conn, pkt.client_id, pkt.clean_start, now)
    if session is None:
        if will is not None:
            broker.routing.messages.drop(will[0])
        refuse(broker, conn, _RC_SERVER_UNAVAILABLE, now, "no free session of max_sessions %d" % s.max_sessions)
        return
    session_life.attach(broker, conn, session, expiry, will)
    session.listener = login.listener_key(conn.peer)  # (its will's rules: login.security_of)
    conn.deadline = 0  # the connect timeout ends; data_received sets the keep-alive's
    _answer(broker, conn, pkt, now, taken, assigned, auth_out)


def _answer(broker, conn, pkt, now, taken, assigned, auth_out):
    # CONNACK (v5: the server's limits and what it chose), the log line, and
    # what a resumed session is owed.
    s = broker.settings
    level = pkt.level
    keep_alive = pkt.keep_alive
    server_keep_alive = None
    if s.max_keepalive and (keep_alive == 0 or keep_alive > s.max_keepalive):
        keep_alive = server_keep_alive = s.max_keepalive  # v5 (3.1.1 was refused)
    conn.keep_alive = keep_alive
    ack_props = None
    if level == _LEVEL_5:
        from common.broker import connect_v5  # (loaded by the first v5 client)

        ack_props = connect_v5.accepted(broker, conn, pkt, pkt.client_id if assigned else None, server_keep_alive, auth_out)
    present = taken & session_life.PRESENT
    send_connack(broker, conn, present and level != _LEVEL_31, ack_props)
    # One line, a takeover's included (a storm of them logs one line per connection).
    broker.log(
        20,
        "%s connected (level %d, keep-alive %d, session %s%s)",
        (pkt.client_id, level, keep_alive, "resumed" if present else "new", ", taking over its live connection" if taken & session_life.TOOK_OVER else ""),
    )
    st = broker.stats
    live = broker.connections.live
    if live > st.clients_maximum:
        st.clients_maximum = live
    if present:
        # [MQTT-4.4.0-1] resend what is unacknowledged, in order, then the
        # queue (a new session has neither).
        outbox.resume(broker, conn, conn.session, now)


def _exchanged(broker, conn, connect, now, done):
    """A step of the AUTH exchange of a waiting CONNECT came back
    (enhanced_auth.py): None, it goes on; (True, data), accepted with the
    method's final data; (False, why), refused."""
    if done is None:
        return
    if done[0]:
        accept(broker, conn, connect, now, done[1])
    else:
        refuse(broker, conn, _RC_NOT_AUTHORIZED, now, done[1])


def _generate_client_id(broker):
    while True:
        raw = broker.entropy(8)
        client_id = "siskin-"
        for b in raw:
            client_id += "0123456789abcdef"[b >> 4] + "0123456789abcdef"[b & 15]
        if broker.sessions.find(client_id) is None:
            return client_id


# ---------------------------------------------------------- DISCONNECT, AUTH


def handle_disconnect(broker, conn, pkt, now):
    session = conn.session
    if conn.level == _LEVEL_5:
        from common.broker import connect_v5  # (loaded by its CONNECT)

        connect_v5.disconnect_expiry(broker, session, pkt)
        # 0x04 "Disconnect with Will Message" keeps the will [MQTT-3.14.4-3].
        keep_will = pkt.reason == _RC_DISCONNECT_WITH_WILL
    else:
        keep_will = False  # [MQTT-3.14.4-3]
    broker.log(20, "%s disconnected (DISCONNECT 0x%02x)", (session.client_id, pkt.reason))
    broker.close(conn, now, keep_will)


def handle_auth(broker, conn, pkt, now):
    """AUTH: the exchange of a CONNECT that waits for it, or re-authentication
    once connected (enhanced_auth.py)."""
    if conn.state == NEW:
        if not conn.connect_pending():
            broker.close(conn, now, publish_will=False)  # [MQTT-3.1.0-1] the first packet must be CONNECT
            return
        if conn.extras.method is None:
            raise ProtocolError("AUTH without an authentication method")  # (waits for an auth hook) [MQTT-4.12.0-1]
        from common.broker import enhanced_auth  # (loaded: an exchange's method is set only there)

        connect = conn.extras.pending
        _exchanged(broker, conn, connect, now, enhanced_auth.continue_connect(broker, conn, pkt))
        return
    if conn.extras is None or conn.extras.method is None:
        # No Authentication Method in CONNECT: AUTH is a protocol error [MQTT-4.12.0-1].
        raise ProtocolError("AUTH without an authentication method")
    from common.broker import enhanced_auth  # (loaded: an exchange's method is set only there)

    enhanced_auth.reauthenticate(broker, conn, pkt, now)
