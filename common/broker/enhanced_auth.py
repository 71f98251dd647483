# v5 enhanced authentication (4.12): the AUTH exchange that a CONNECT naming
# an Authentication Method starts, and re-authentication once connected.
#
# Theory of operation. Loaded only when a method is configured (the Broker
# imports it with scram_users: RAM on the boards). Without one, handle_connect
# answers a CONNECT that names a method with CONNACK 0x8C and an AUTH with a
# protocol error, with no code from here; with one, the method of the
# connection's Extras (conn.extras.method) is set only here, so the paths
# that come back to this module
# (handle_connect's AUTH before CONNACK, its handle_auth once connected) find
# it already loaded.
#
# start() runs the method's first step on the CONNECT's Authentication Data:
# it succeeds at once (the CONNECT goes on, CONNACK carries the method's
# final data), fails (CONNACK 0x87), or continues: the CONNECT waits in the
# connection's Extras while AUTH packets go back and forth (continue_connect).
# Both answer handle_connect, which accepts or refuses the CONNECT: None
# while the exchange goes on (an AUTH was sent), else (True, the method's
# final data) or (False, why).

from common.crypto.auth_scram import CONTINUE, FAIL, SUCCESS, ScramSha256
from common.mqtt import consts as C
from common.mqtt.errors import ProtocolError
from common.mqtt.packets import Auth, encode_packet, prop_get


def methods(scram_users):
    """The methods by name, for Broker.auth_methods."""
    method = ScramSha256(scram_users)
    return {method.name: method}


def start(broker, conn, pkt, method):
    """A CONNECT (`pkt`) that names `method`: its first step (see above)."""
    status, out, state = method.start(prop_get(pkt.props, C.PROP_AUTHENTICATION_DATA, b""), broker.entropy)
    exchange = conn.extra()
    exchange.method = method
    if status == CONTINUE:
        exchange.state = state
        exchange.pending = pkt
        _send_auth(broker, conn, C.RC_CONTINUE_AUTHENTICATION, out)
        return None
    if status != SUCCESS:
        return False, "%s authentication failed" % method.name
    conn.user = state  # the user the method proved at once
    return True, out or b""


def _send_auth(broker, conn, reason, data):
    props = [(C.PROP_AUTHENTICATION_METHOD, conn.extras.method.name)]
    if data:
        props.append((C.PROP_AUTHENTICATION_DATA, data))
    broker.output.write(conn, encode_packet(Auth(reason, props), C.LEVEL_5))


def _auth_step(broker, conn, pkt):
    """Run one step of the exchange; the method's (status, out_data)."""
    exchange = conn.extras  # (an exchange goes on: its method is set)
    method = exchange.method
    if prop_get(pkt.props, C.PROP_AUTHENTICATION_METHOD, None) != method.name:
        raise ProtocolError("AUTH with another authentication method")  # [MQTT-4.12.0-5]
    data = prop_get(pkt.props, C.PROP_AUTHENTICATION_DATA, b"")
    if pkt.reason == C.RC_REAUTHENTICATE:
        status, out, state = method.start(data, broker.entropy)
    elif pkt.reason == C.RC_CONTINUE_AUTHENTICATION and exchange.state is not None:
        status, out, state = method.step(exchange.state, data)
    else:
        raise ProtocolError("unexpected AUTH reason code")
    exchange.state = state if status == CONTINUE else None
    if status == SUCCESS:
        if conn.user is not None and conn.user != state:
            return FAIL, None  # re-authentication as another user: the ACL was given to the first
        conn.user = state  # the user the method proved
    return status, out


def continue_connect(broker, conn, pkt):
    """An AUTH while the CONNECT waits for the exchange to end (see above);
    the CONNECT no longer waits once it is over."""
    status, out = _auth_step(broker, conn, pkt)
    if status == CONTINUE:
        _send_auth(broker, conn, C.RC_CONTINUE_AUTHENTICATION, out)
        return None
    exchange = conn.extras
    exchange.pending = None
    if status == SUCCESS:
        return True, out or b""
    return False, "%s authentication failed" % exchange.method.name


def reauthenticate(broker, conn, pkt, now):
    """An AUTH once connected, on a connection that authenticated [MQTT-4.12.1-1]."""
    status, out = _auth_step(broker, conn, pkt)
    if status == CONTINUE:
        _send_auth(broker, conn, C.RC_CONTINUE_AUTHENTICATION, out)
    elif status == SUCCESS:
        _send_auth(broker, conn, C.RC_SUCCESS, out)
    else:
        broker.fail(conn, C.RC_NOT_AUTHORIZED, now, text="re-authentication failed")  # [MQTT-4.12.1-2]
