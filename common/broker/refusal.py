# The answers that end a connection with a reason: fail() (an error after
# or during CONNECT: v5 DISCONNECT or CONNACK with its reason code, 3.1.1
# the close or the one return code it has), refuse_connect() (a CONNECT
# that a check of handle_connect refused), the close of a connection whose
# timer expired (connect timeout, keep-alive) or whose first byte is not a
# CONNECT's, the end of a retained replay that stalled
# (replay.py) and the words of two of those checks (an
# anonymous client, another user's session: login.py's rules),
# and the v5 Reason String fitted to the client's Maximum Packet Size.
# Loaded by the first refusal or failure: a board whose clients connect and
# leave cleanly keeps none of this code (Broker.fail hands over to it).

from common.broker.clienttext import REASON_STRING_MAX, clip, user_name, words
from common.broker.connection import CONNECTED, NEW
from common.mqtt import consts as C
from common.mqtt.packets import Connack, Disconnect, encode_packet

# v5 reason code -> 3.1.1 CONNACK return code
_V3_CONNACK = {
    C.RC_UNSUPPORTED_PROTOCOL_VERSION: C.CONNACK_REFUSED_PROTOCOL_VERSION,
    C.RC_CLIENT_IDENTIFIER_NOT_VALID: C.CONNACK_REFUSED_IDENTIFIER_REJECTED,
    C.RC_BAD_USER_NAME_OR_PASSWORD: C.CONNACK_REFUSED_BAD_USERNAME_PASSWORD,
    C.RC_NOT_AUTHORIZED: C.CONNACK_REFUSED_NOT_AUTHORIZED,
}


def fail(broker, conn, reason, now, publish_will=True, text=None):
    """Close after an error, telling the client `reason` where its protocol can.

    A v5 client connected: DISCONNECT; a CONNECT not accepted: CONNACK (v5
    level, or 3.1.1's 0x01 for a level we do not speak); else just close.
    `text` becomes the v5 Reason String. Returns what the client was sent,
    in words for the log line that names the code the client received.
    """
    if conn.state == CONNECTED and conn.level == C.LEVEL_5:
        broker.output.write(conn, with_reason_string(conn, Disconnect(reason, None), text))
        sent = "DISCONNECT reason 0x%02x" % reason
    elif conn.state == NEW and conn.level == C.LEVEL_5:
        # A v5 CONNECT malformed or a protocol error (or an unknown
        # protocol name, 0x84): the server MAY send a CONNACK 0x80 or
        # above before closing (4.13.1).
        if reason not in C.REASONS_CONNACK:
            reason = C.RC_UNSPECIFIED_ERROR
        broker.output.write(conn, with_reason_string(conn, Connack(False, reason, None), text))
        sent = "CONNACK reason 0x%02x" % reason
    elif conn.state == NEW and reason == C.RC_UNSUPPORTED_PROTOCOL_VERSION:
        # [MQTT-3.1.2-2] 3.1.1 CONNACK 0x01 for a level we do not speak:
        # the client's level is unknown, so answer in the oldest format.
        broker.output.write(conn, encode_packet(Connack(False, C.CONNACK_REFUSED_PROTOCOL_VERSION, None), C.LEVEL_311))
        sent = "CONNACK return code 0x01"
    else:
        sent = "no code (3.1.1 closes without one)"
    broker.close(conn, now, publish_will)
    return sent


def with_reason_string(conn, pkt, text):
    """The v5 `pkt` encoded with `text` as its Reason String, left out
    beyond the client's Maximum Packet Size [MQTT-3.1.2-25] [MQTT-3.14.2-3].
    A text longer than REASON_STRING_MAX characters is cut (clip): a
    Reason String never makes the packet fail to encode."""
    if text:
        pkt.props = [(C.PROP_REASON_STRING, clip(text, REASON_STRING_MAX))]
        data = encode_packet(pkt, C.LEVEL_5)
        extras = conn.extras
        if extras is None or not extras.max_packet_out or len(data) <= extras.max_packet_out:
            return data
        pkt.props = None
    return encode_packet(pkt, C.LEVEL_5)


def refuse_connect(broker, conn, reason, now, why):
    """Refuse the CONNECT with `reason`; `why` names the rule or limit and its
    value, for the log and the v5 Reason String: a str, or (format, args)
    with the client's text in args (both cut and escaped: broker.words)."""
    if conn.level == C.LEVEL_5:
        broker.output.write(conn, with_reason_string(conn, Connack(False, reason, None), words(why)))
        sent = "reason"
    else:
        reason = _V3_CONNACK.get(reason, C.CONNACK_REFUSED_SERVER_UNAVAILABLE)
        broker.output.write(conn, bytes((0x20, 2, 0, reason)))
        sent = "return code"
    broker.log(30, "refused CONNECT on #%d: %s; sent CONNACK %s 0x%02x", (conn.cid, why, sent, reason))
    broker.close(conn, now, publish_will=False)


def timed_out(broker, conn, now):
    """Close a connection whose timer expired (Broker.tick): a new one
    without a complete CONNECT in connect_timeout s, closed; a client
    silent for 1.5 x its keep-alive [MQTT-3.1.2-24], v5 DISCONNECT 0x8D."""
    if conn.state == NEW:
        broker.log(20, "closing #%d: no CONNECT within %d s", (conn.cid, broker.settings.connect_timeout))
        broker.close(conn, now)
    else:
        broker.log(20, "closing %s: keep-alive expired", (broker.client_name(conn),))
        fail(broker, conn, C.RC_KEEP_ALIVE_TIMEOUT, now)


def not_a_connect(broker, conn, data, now):
    """Close a new connection whose first byte is not a CONNECT's
    [MQTT-3.1.0-1] (a peer that does not speak MQTT: an HTTP GET) without
    waiting for the body its "remaining length" announces, and without a
    CONNACK it could not read (Broker.data_received)."""
    broker.stats.bytes_received += len(data)
    broker.log(30, "closing #%d: first byte 0x%02x is not a CONNECT's (0x10); closed without CONNACK", (conn.cid, data[0]))
    broker.close(conn, now, publish_will=False)


def replay_stalled(broker, replay, now, limit):
    """End the connection of `replay`, which has not moved for `limit` s
    (replay.close_stalled): counted, logged, a v5 client told DISCONNECT
    0x97 with the reason."""
    broker.stats.closed_replay_stalled += 1
    conn = replay.conn
    text = "retained replay stalled: %d message(s) sent, more owed, output not drained for %d s (replay_stall_timeout %d)" % (
        replay.sent,
        now - replay.moved,
        limit,
    )
    name = broker.client_name(conn)
    broker.log(30, "closing %s: %s; sent %s", (name, text, fail(broker, conn, C.RC_QUOTA_EXCEEDED, now, text=text)))


def anonymous_refused(sec):
    """Why an anonymous client is refused under `sec` (login.security_of:
    the listener's own users and switch, or the broker's), as (format,
    args): our words, not cut as client text would be (broker.words)."""
    if sec.allow_anonymous is False:
        return "anonymous client refused: allow_anonymous is false", ()
    if sec.users is not None:
        return "anonymous client refused: a password file is configured and allow_anonymous is not set (set it true to allow)", ()
    return "anonymous client refused: the listener is not loopback-only and no users are configured (set allow_anonymous = true, or configure a password file)", ()


def owner_refusal(broker, user, peer, session, client_id):
    """The words of the refusal of `user`'s client (through `peer`), which
    claims `session`, another user's (counted; the log line names both
    users)."""
    broker.stats.denied_takeover += 1
    broker.log(
        30,
        "client id %s from %s (user %s) refused: its session belongs to user %s",
        (client_id, peer[0] if peer is not None else "-", user_name(user), user_name(session.user)),
    )
    return "client id in use by another user's session"
