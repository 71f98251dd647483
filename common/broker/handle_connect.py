# CONNECT, DISCONNECT and AUTH; session lifetime, takeover and wills.
# The AUTH exchange itself (v5 enhanced authentication) is enhanced_auth.py,
# loaded only with a configured method; here are its refusals without one.
#
# Theory of operation. A CONNECT is checked in the order of the spec's
# statements; each refusal is a CONNACK with the level's code, then close.
# An accepted CONNECT either resumes the session of its client id or starts a
# new one with a new generation number. A live connection already serving
# that client id is taken over: it is closed (v5: DISCONNECT 0x8E) and its
# will published as for any abnormal close [MQTT-3.1.4-2].
#
# When a connection ends, detach() decides the fate of its will (published at
# once, delayed by the v5 Will Delay Interval, or discarded after a normal
# DISCONNECT) and of its session (destroyed, or kept orphaned until its expiry
# time). run_session_timers() publishes delayed wills and expires orphans.

from common.broker import handle_subscribe, login, outbox
from common.broker.clienttext import words
from common.broker.connection import CONNECTED, NEW
from common.broker.handle_publish import forwarded, write_denied
from common.broker.route import route
from common.broker.session import NEVER
from common.broker.topics import over_limits
from common.mqtt import consts as C
from common.mqtt.errors import ProtocolError
from common.mqtt.packets import Connack, encode_packet, prop_get

# v5 reason code -> 3.1.1 CONNACK return code
_V3_CONNACK = {
    C.RC_SUCCESS: C.CONNACK_ACCEPTED,
    C.RC_UNSUPPORTED_PROTOCOL_VERSION: C.CONNACK_REFUSED_PROTOCOL_VERSION,
    C.RC_CLIENT_IDENTIFIER_NOT_VALID: C.CONNACK_REFUSED_IDENTIFIER_REJECTED,
    C.RC_BAD_USER_NAME_OR_PASSWORD: C.CONNACK_REFUSED_BAD_USERNAME_PASSWORD,
    C.RC_NOT_AUTHORIZED: C.CONNACK_REFUSED_NOT_AUTHORIZED,
}


def send_connack(broker, conn, session_present, reason, props=None):
    """Send the CONNACK; the code the client receives (3.1.1: its return code)."""
    if conn.level == C.LEVEL_5:
        broker.write(conn, encode_packet(Connack(session_present, reason, props), C.LEVEL_5))
        return reason
    # 3.1.1: four fixed bytes (one per connection in a connect storm).
    code = _V3_CONNACK.get(reason, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)
    broker.write(conn, bytes((0x20, 2, 1 if session_present else 0, code)))
    return code


def refuse(broker, conn, reason, now, why):
    """Refuse the CONNECT with `reason`; `why` names the rule or limit and its
    value, for the log and the v5 Reason String: a str, or (format, args)
    with the client's text in args (both cut and escaped: broker.words)."""
    if conn.level == C.LEVEL_5:
        broker.write(conn, broker.with_reason_string(conn, Connack(False, reason, None), words(why)))
        sent = "reason"
    else:
        reason = send_connack(broker, conn, False, reason)
        sent = "return code"
    broker.log(30, "refused CONNECT on #%d: %s; sent CONNACK %s 0x%02x", (conn.cid, why, sent, reason))
    broker.close(conn, now, publish_will=False)


# ------------------------------------------------------------------ CONNECT


def handle_connect(broker, conn, pkt, now):
    """A CONNECT (the dispatch table lets one through only before CONNACK)."""
    if conn.connect_pending():
        # A CONNECT while the first waits for its AUTH exchange [MQTT-3.1.0-1].
        broker.close(conn, now, publish_will=False)
        return
    accept(broker, conn, pkt, now, None)


# A step's answer that stops the CONNECT without a refusal: it waits for
# its AUTH exchange (or was answered by it).
_WAIT = (0, None)


def _check_level(broker, conn, pkt, now):
    if pkt.level == C.LEVEL_31 and not broker.settings.allow_mqtt31:
        return C.RC_UNSUPPORTED_PROTOCOL_VERSION, "MQTT 3.1 (MQIsdp) with allow_mqtt31 false"  # [MQTT-3.1.2-2]
    return None


def _check_capacity(broker, conn, pkt, now):
    if conn.extras is not None and conn.extras.refuse_reason:
        # Accepted beyond max_connections only to say so.
        reason = C.RC_SERVER_BUSY if conn.level == C.LEVEL_5 else C.RC_SERVER_UNAVAILABLE
        return reason, "over max_connections %d" % broker.settings.max_connections
    return None


def _check_auth_method(broker, conn, pkt, now):
    # v5 enhanced authentication (4.12): a method that is not configured is
    # refused; a configured one runs its exchange first (enhanced_auth.py),
    # and the CONNECT comes back here once it succeeded (the method set).
    if conn.level != C.LEVEL_5 or (conn.extras is not None and conn.extras.method is not None):
        return None
    name = prop_get(pkt.props, C.PROP_AUTHENTICATION_METHOD, None)
    if name is None:
        return None
    method = broker.auth_methods.get(name)
    if method is None:
        return C.RC_BAD_AUTHENTICATION_METHOD, ("authentication method '%s' not configured", (name,))
    # (Loaded with the methods by the Broker: no import from the network.)
    from common.broker import enhanced_auth

    _exchanged(broker, conn, pkt, now, enhanced_auth.start(broker, conn, pkt, method))
    return _WAIT


def _check_login(broker, conn, pkt, now):
    # Who the client is, and whether it may connect (login.py): 3.1.1
    # CONNACK 0x04 / v5 0x86 for a bad user name or password, 0x05 / 0x87
    # for a client that is not allowed in.
    return login.login(broker, conn, pkt, now) or None


def _check_client_id(broker, conn, pkt, now):
    # [MQTT-3.1.3-*]. An empty one is given an id of the broker's here, so
    # that the steps after this one (the ACL's rules) see the id it will have.
    client_id = pkt.client_id
    if not client_id:
        if conn.level != C.LEVEL_5 and not pkt.clean_start:
            return C.RC_CLIENT_IDENTIFIER_NOT_VALID, "empty client id without clean session"  # [MQTT-3.1.3-8]
        pkt.client_id = _generate_client_id(broker)  # [MQTT-3.1.3-6]
        if conn.level == C.LEVEL_5:
            conn.extra().assigned_id = True  # told in CONNACK (Assigned Client Identifier)
        return None
    limit = broker.settings.max_client_id_length
    if len(client_id) > limit:
        why = "client id of %d characters over max_client_id_length %d" % (len(client_id), limit)
        return C.RC_CLIENT_IDENTIFIER_NOT_VALID, why  # [MQTT-3.1.3-9]
    return None


def _check_keep_alive(broker, conn, pkt, now):
    # The keep-alive cap: v5 is told the server's value (CONNACK); 3.1.1 has
    # no way to be told, so it is refused as mosquitto does.
    cap = broker.settings.max_keepalive
    keep_alive = pkt.keep_alive
    if conn.level != C.LEVEL_5 and cap and (keep_alive == 0 or keep_alive > cap):
        return C.RC_CLIENT_IDENTIFIER_NOT_VALID, "keep-alive %d s outside max_keepalive %d s (0 = none)" % (keep_alive, cap)
    return None


def _check_owner(broker, conn, pkt, now):
    # Another user's session (live or kept) is not this client's to take.
    session = broker.sessions.find(pkt.client_id)
    if session is not None:
        why = login.owner_refusal(broker, conn, session, pkt.client_id)
        if why is not None:
            return C.RC_NOT_AUTHORIZED, why
    # Its ACL rules, before the will is judged by them; a resumed session's
    # subscriptions are re-checked at the accept.
    login.grant(broker, conn, pkt.client_id)
    return None


def _check_will(broker, conn, pkt, now):
    """The CONNECT refusal for its will and its words, or None; the codec
    checked the rest of the topic (not empty, no wildcard, no U+0000), as it
    does a PUBLISH's, and the checks here are handle_publish's: the will is
    refused exactly as the same live PUBLISH would be."""
    if pkt.will_topic is None:
        return None
    s = broker.settings
    if over_limits(pkt.will_topic, s.max_topic_levels, s.max_topic_length):
        why = "will topic over max_topic_levels %d or max_topic_length %d" % (s.max_topic_levels, s.max_topic_length)
        return C.RC_TOPIC_NAME_INVALID, why
    if pkt.will_topic.startswith("$SYS"):
        return C.RC_NOT_AUTHORIZED, "will topic in $SYS"
    if conn.acl is not None and not conn.acl.can_write(pkt.will_topic):
        broker.stats.denied_publish += 1
        return C.RC_NOT_AUTHORIZED, ("the ACL does not let user %s write the will topic %s", (conn.user, pkt.will_topic))
    if pkt.level == C.LEVEL_5:
        if pkt.will_qos > s.maximum_qos:
            return C.RC_QOS_NOT_SUPPORTED, "will QoS %d over maximum_qos %d" % (pkt.will_qos, s.maximum_qos)  # [MQTT-3.2.2-12]
        if pkt.will_retain and not s.retain_available:
            return C.RC_RETAIN_NOT_SUPPORTED, "will retain with retain_available false"  # [MQTT-3.2.2-13]
    return None


# The checks of a CONNECT, in this order (that of the spec's statements,
# and each needs what the ones before it found: the user for the owner,
# the client id and rules for the will). Each answers None (go on),
# (reason, why) for refuse(), or _WAIT.
CONNECT_CHECKS = (
    _check_level,
    _check_capacity,
    _check_auth_method,
    _check_login,
    _check_client_id,
    _check_keep_alive,
    _check_owner,
    _check_will,
)


def accept(broker, conn, pkt, now, auth_out):
    """Check and accept a CONNECT; `auth_out` (bytes) is set once enhanced
    authentication succeeded (enhanced_auth.py), else None."""
    level = pkt.level
    conn.level = C.LEVEL_5 if level == C.LEVEL_5 else C.LEVEL_311
    if level == C.LEVEL_5:
        # Before any refusal: its Reason String must fit [MQTT-3.1.2-25].
        limit = prop_get(pkt.props, C.PROP_MAXIMUM_PACKET_SIZE, 0)
        if limit:
            conn.extra().max_packet_out = limit
    for check in CONNECT_CHECKS:
        refusal = check(broker, conn, pkt, now)
        if refusal is not None:
            if refusal[0]:
                refuse(broker, conn, refusal[0], now, refusal[1])
            return
    s = broker.settings
    v5 = level == C.LEVEL_5

    # The will is kept (a message slab held) before CONNACK acknowledges it.
    will = None
    if pkt.will_topic is not None:
        will = _new_will(broker, pkt)
        if will is None:
            broker.stats.dropped_no_slab += 1
            why = "message store full (max_messages %d): the will cannot be kept" % s.max_messages
            refuse(broker, conn, C.RC_QUOTA_EXCEEDED if v5 else C.RC_SERVER_UNAVAILABLE, now, why)
            return

    client_id = pkt.client_id
    extras = conn.extras
    assigned = client_id if extras is not None and extras.assigned_id else None
    keep_alive = pkt.keep_alive
    server_keep_alive = None
    if s.max_keepalive and (keep_alive == 0 or keep_alive > s.max_keepalive):
        keep_alive = server_keep_alive = s.max_keepalive  # v5 (3.1.1 was refused)

    # Session expiry.
    if v5:
        expiry = prop_get(pkt.props, C.PROP_SESSION_EXPIRY_INTERVAL, 0)
        if expiry > s.max_session_expiry:
            expiry = s.max_session_expiry
    elif pkt.clean_start:
        expiry = 0
    else:
        expiry = s.persistent_session_expiry or NEVER

    # Takeover and session resumption.
    sessions = broker.sessions
    session = sessions.find(client_id)
    took_over = session is not None and session.conn is not None
    if took_over:
        broker.fail(session.conn, C.RC_SESSION_TAKEN_OVER, now)  # [MQTT-3.1.4-2]
        session = sessions.find(client_id)  # the close may have ended it
    if session is not None and pkt.clean_start:
        destroy_session(broker, session, now)  # [MQTT-3.1.2-6] [MQTT-3.1.2-4]
        session = None
    session_present = session is not None
    if session is None:
        session = sessions.create(client_id)
        if session is None:
            if will is not None:
                broker.routing.messages.drop(will[0])
            refuse(broker, conn, C.RC_SERVER_UNAVAILABLE, now, "no free session of max_sessions %d" % s.max_sessions)
            return
        session.user = conn.user
    else:
        session.drop_will(broker.routing.messages)
        if conn.acl is not None:
            # Its owner or the rules may have changed since it was made.
            from common.broker import secured  # (loaded with the rules: login.set_security)

            secured.recheck(broker, conn, session, now)
            secured.drop_unreadable_inflight(broker, conn, session)
    session.level = conn.level
    session.expiry_interval = expiry
    session.expires_at = 0
    session.conn = conn
    conn.session = session
    conn.keep_alive = keep_alive
    conn.deadline = 0  # the connect timeout ends; data_received sets the keep-alive's
    conn.state = CONNECTED
    by_client = broker.stats.by_client
    if by_client is not None:
        by_client.connected(conn.cid)
    if will is not None:
        session.will = will
    broker.listener.session_saved(session)

    ack_props = None
    if v5:
        props = pkt.props
        conn.receive_maximum = prop_get(props, C.PROP_RECEIVE_MAXIMUM, C.U16_MAX)
        alias_max = prop_get(props, C.PROP_TOPIC_ALIAS_MAXIMUM, 0)
        if alias_max:
            conn.extra().alias_max_out = alias_max
        if prop_get(props, C.PROP_REQUEST_PROBLEM_INFORMATION, 1) != 1:
            conn.extra().problem_info = False
        ack_props = _connack_props(broker, pkt, assigned, server_keep_alive, expiry)
        extras = conn.extras
        if extras is not None and extras.method is not None:
            ack_props.append((C.PROP_AUTHENTICATION_METHOD, extras.method.name))
            if auth_out:
                ack_props.append((C.PROP_AUTHENTICATION_DATA, auth_out))
    send_connack(broker, conn, session_present and level != C.LEVEL_31, C.RC_SUCCESS, ack_props)
    # One line, a takeover's included (a storm of them logs one line per connection).
    broker.log(
        20,
        "%s connected (level %d, keep-alive %d, session %s%s)",
        (client_id, level, keep_alive, "resumed" if session_present else "new", ", taking over its live connection" if took_over else ""),
    )
    st = broker.stats
    live = broker.connections.live
    if live > st.clients_maximum:
        st.clients_maximum = live
    if session_present:
        # [MQTT-4.4.0-1] resend what is unacknowledged, in order, then the
        # queue (a new session has neither).
        outbox.resume(broker, conn, session, now)


def _exchanged(broker, conn, connect, now, done):
    """A step of the AUTH exchange of a waiting CONNECT came back
    (enhanced_auth.py): None, it goes on; (True, data), accepted with the
    method's final data; (False, why), refused."""
    if done is None:
        return
    if done[0]:
        accept(broker, conn, connect, now, done[1])
    else:
        refuse(broker, conn, C.RC_NOT_AUTHORIZED, now, done[1])


def _connack_props(broker, pkt, assigned, server_keep_alive, expiry):
    s = broker.settings
    props = [
        (C.PROP_RECEIVE_MAXIMUM, s.max_inflight_in),
        (C.PROP_MAXIMUM_PACKET_SIZE, s.max_packet_size),
        (C.PROP_TOPIC_ALIAS_MAXIMUM, s.topic_alias_maximum),
    ]
    if assigned is not None:
        props.append((C.PROP_ASSIGNED_CLIENT_IDENTIFIER, assigned))
    if server_keep_alive is not None:
        props.append((C.PROP_SERVER_KEEP_ALIVE, server_keep_alive))
    if expiry != prop_get(pkt.props, C.PROP_SESSION_EXPIRY_INTERVAL, 0):
        props.append((C.PROP_SESSION_EXPIRY_INTERVAL, expiry))
    if s.maximum_qos < 2:
        props.append((C.PROP_MAXIMUM_QOS, s.maximum_qos))
    if not s.retain_available:
        props.append((C.PROP_RETAIN_AVAILABLE, 0))
    if not s.wildcard_subscriptions:
        props.append((C.PROP_WILDCARD_SUBSCRIPTION_AVAILABLE, 0))
    if not s.subscription_identifiers:
        props.append((C.PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE, 0))
    if not s.shared_subscriptions:
        props.append((C.PROP_SHARED_SUBSCRIPTION_AVAILABLE, 0))
    if s.response_information and prop_get(pkt.props, C.PROP_REQUEST_RESPONSE_INFORMATION, 0):
        props.append((C.PROP_RESPONSE_INFORMATION, s.response_information))
    return props


def _generate_client_id(broker):
    while True:
        raw = broker.entropy(8)
        client_id = "siskin-"
        for b in raw:
            client_id += "0123456789abcdef"[b >> 4] + "0123456789abcdef"[b & 15]
        if broker.sessions.find(client_id) is None:
            return client_id


def _new_will(broker, pkt):
    """(held Message, delay, expiry) for the CONNECT's will; None if the
    message pool has no room for it."""
    props = pkt.will_props
    delay = 0
    expiry = 0
    fwd = None
    if props:
        taken = 0
        for prop_id, value in props:
            if prop_id == C.PROP_WILL_DELAY_INTERVAL:
                delay = value
                taken += 1
            elif prop_id == C.PROP_MESSAGE_EXPIRY_INTERVAL:
                expiry = value
                taken += 1
        fwd = forwarded(props, taken, C.PROP_WILL_DELAY_INTERVAL)
    messages = broker.routing.messages
    msg = messages.new(pkt.will_topic, pkt.will_payload, pkt.will_qos, pkt.will_retain, fwd, 0)
    if msg is None:
        return None
    messages.hold(msg)
    return msg, delay, expiry


def _publish_will(broker, session, now):
    will = session.will
    session.will = None
    session.will_at = 0
    if will is None:
        return
    msg = will[0]
    # A will is a publish by its owner, judged by the rules in force now.
    acl = broker.acl
    payload = msg.payload
    if broker.sparkplug is not None:
        payload = broker.sparkplug.will_payload(broker, session, msg.topic, payload, now)  # None: refused
    if payload is not None and (acl is None or not write_denied(broker, acl.for_client(session.user, session.client_id), session, session.user, msg.topic, now, "will")):
        route(broker, None, msg, payload, will[2], now)
    broker.routing.messages.drop(msg)


# ----------------------------------------------------- end of a connection


def detach(broker, conn, now, publish_will=True):
    """The connection ends (any reason): decide the will and the session.
    `publish_will` False: it ends without its will (a normal DISCONNECT,
    Broker.close's callers)."""
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
            _publish_will(broker, session, now)  # [MQTT-3.1.2-8]
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
            _publish_will(broker, session, now)  # the session ends before the delay
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
            _publish_will(broker, session, now)
    for session in due:
        if session.expires_at and now > session.expires_at and session.conn is None:
            destroy_session(broker, session, now)
    return now


# ---------------------------------------------------------- DISCONNECT, AUTH


def handle_disconnect(broker, conn, pkt, now):
    session = conn.session
    if conn.level == C.LEVEL_5:
        expiry = prop_get(pkt.props, C.PROP_SESSION_EXPIRY_INTERVAL, None)
        if expiry is not None:
            if session.expiry_interval == 0 and expiry != 0:
                # [MQTT-3.14.2-2] cannot turn a non-persistent session persistent.
                raise ProtocolError("Session Expiry set on DISCONNECT after 0 at CONNECT")
            if expiry > broker.settings.max_session_expiry:
                expiry = broker.settings.max_session_expiry
            session.expiry_interval = expiry
        # 0x04 "Disconnect with Will Message" keeps the will [MQTT-3.14.4-3].
        keep_will = pkt.reason == C.RC_DISCONNECT_WITH_WILL
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
        from common.broker import enhanced_auth  # (loaded: an exchange's method is set only there)

        connect = conn.extras.pending
        _exchanged(broker, conn, connect, now, enhanced_auth.continue_connect(broker, conn, pkt))
        return
    if conn.extras is None or conn.extras.method is None:
        # No Authentication Method in CONNECT: AUTH is a protocol error [MQTT-4.12.0-1].
        raise ProtocolError("AUTH without an authentication method")
    from common.broker import enhanced_auth  # (loaded: an exchange's method is set only there)

    enhanced_auth.reauthenticate(broker, conn, pkt, now)
