"""The codec's one error type and its subclasses.

Every malformed or illegal input raises an ``MqttError`` that carries the MQTT
5.0 reason code the specification names (2.4), so the connection layer can turn
it into output: a DISCONNECT with that reason (v5), a CONNACK refusal, or just a
close (3.1.1). Nothing else may escape the frame reader or ``decode_packet``.

MicroPython notes: ``super().__init__`` (``Exception.__init__`` does not exist
there), explicit attributes (no exception chaining), single inheritance.
"""

from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_RC_MALFORMED_PACKET = const(0x81)
_RC_PACKET_TOO_LARGE = const(0x95)
_RC_PROTOCOL_ERROR = const(0x82)
_RC_TOPIC_NAME_INVALID = const(0x90)
_RC_UNSUPPORTED_PROTOCOL_VERSION = const(0x84)


class MqttError(Exception):
    """A protocol violation with the v5 reason code that answers it.

    ``reason`` is the reason code (an int), ``msg`` a short human explanation
    (for logs; never sent on the wire unless the broker puts it in a Reason
    String).
    """

    def __init__(self, reason, msg=""):
        super().__init__(msg)
        self.reason = reason
        self.msg = msg

    def __repr__(self):
        return "%s(0x%02X, %r)" % (type(self).__name__, self.reason, self.msg)

    def __str__(self):
        return "0x%02X %s" % (self.reason, self.msg)


class MalformedPacket(MqttError):
    """0x81: the bytes do not follow the packet grammar."""

    def __init__(self, msg=""):
        super().__init__(_RC_MALFORMED_PACKET, msg)


class ProtocolError(MqttError):
    """0x82: well-formed bytes that the protocol forbids."""

    def __init__(self, msg=""):
        super().__init__(_RC_PROTOCOL_ERROR, msg)


class PacketTooLarge(MqttError):
    """0x95: the packet exceeds the maximum packet size we accept."""

    def __init__(self, msg=""):
        super().__init__(_RC_PACKET_TOO_LARGE, msg)


class UnsupportedProtocol(MqttError):
    """0x84 (v5) / CONNACK return code 0x01 (3.1.1): a protocol level we do not speak.

    The broker answers it with a 3.1.1 CONNACK 0x01 (common/broker/broker.py: the
    client's dialect is unknown), or a v5 CONNACK 0x84 when the level byte is 5
    (an unknown protocol name, 5.0 [MQTT-3.1.2-1]); the level is only named in
    ``msg``, for the log.
    """

    def __init__(self, msg=""):
        super().__init__(_RC_UNSUPPORTED_PROTOCOL_VERSION, msg)


class TopicNameInvalid(MqttError):
    """0x90: a PUBLISH (or will) topic name that is not a valid topic name."""

    def __init__(self, msg=""):
        super().__init__(_RC_TOPIC_NAME_INVALID, msg)
