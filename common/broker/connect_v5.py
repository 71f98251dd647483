# What a v5 CONNECT adds to handle_connect's answer, loaded by the first v5
# client: the client's own limits read from its properties (Receive
# Maximum, Topic Alias Maximum, Request Problem Information), the CONNACK's
# properties (the server's limits and what it chose for the client), and
# the Session Expiry Interval a DISCONNECT may set. A board whose clients
# speak 3.1.1 keeps none of this code.

from common.mqtt import consts as C
from common.mqtt.errors import ProtocolError
from common.mqtt.packets import prop_get


def accepted(broker, conn, pkt, assigned, server_keep_alive, auth_out):
    """Take the client's limits from its accepted CONNECT; the CONNACK's
    properties. `assigned`: the client id the broker gave it (None: its
    own); `server_keep_alive`: the keep-alive the server chose (None: the
    client's); `auth_out`: an enhanced authentication's final data."""
    props = pkt.props
    conn.receive_maximum = prop_get(props, C.PROP_RECEIVE_MAXIMUM, C.U16_MAX)
    alias_max = prop_get(props, C.PROP_TOPIC_ALIAS_MAXIMUM, 0)
    if alias_max:
        conn.extra().alias_max_out = alias_max
    if prop_get(props, C.PROP_REQUEST_PROBLEM_INFORMATION, 1) != 1:
        conn.extra().problem_info = False
    ack_props = _connack_props(broker, pkt, assigned, server_keep_alive, conn.session.expiry_interval)
    extras = conn.extras
    if extras is not None and extras.method is not None:
        ack_props.append((C.PROP_AUTHENTICATION_METHOD, extras.method.name))
        if auth_out:
            ack_props.append((C.PROP_AUTHENTICATION_DATA, auth_out))
    return ack_props


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


def disconnect_expiry(broker, session, pkt):
    """The Session Expiry Interval a v5 DISCONNECT sets, if it sets one."""
    expiry = prop_get(pkt.props, C.PROP_SESSION_EXPIRY_INTERVAL, None)
    if expiry is None:
        return
    if session.expiry_interval == 0 and expiry != 0:
        # [MQTT-3.14.2-2] cannot turn a non-persistent session persistent.
        raise ProtocolError("Session Expiry set on DISCONNECT after 0 at CONNECT")
    if expiry > broker.settings.max_session_expiry:
        expiry = broker.settings.max_session_expiry
    session.expiry_interval = expiry
