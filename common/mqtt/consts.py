"""Public constants of the wire protocol: packet types, protocol levels, reason
codes, property identifiers and subscription option bits.

Every name is public (no leading underscore) because MicroPython removes
``_X = const(...)`` names from module globals, so another module could not
import them. Values are from the MQTT 3.1.1 (OASIS Standard, 2014) and MQTT 5.0
(OASIS Standard, 2019) specifications; section numbers are those of 5.0 unless
marked otherwise.
"""

from common.compat import const

# ---------------------------------------------------------------------------
# Protocol levels (the Protocol Level byte of CONNECT, 3.1.2.2)
# ---------------------------------------------------------------------------
LEVEL_31 = const(3)  # MQTT 3.1, protocol name "MQIsdp"; decodes like 3.1.1
LEVEL_311 = const(4)  # MQTT 3.1.1
LEVEL_5 = const(5)  # MQTT 5.0

# ---------------------------------------------------------------------------
# Control packet types (2.1.2, the high nibble of the first byte)
# ---------------------------------------------------------------------------
CONNECT = const(1)
CONNACK = const(2)
PUBLISH = const(3)
PUBACK = const(4)
PUBREC = const(5)
PUBREL = const(6)
PUBCOMP = const(7)
SUBSCRIBE = const(8)
SUBACK = const(9)
UNSUBSCRIBE = const(10)
UNSUBACK = const(11)
PINGREQ = const(12)
PINGRESP = const(13)
DISCONNECT = const(14)
AUTH = const(15)

# Pseudo packet type for the Will Properties of CONNECT (property table only).
WILL = const(16)

PACKET_NAMES = (
    "RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL",
    "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ",
    "PINGRESP", "DISCONNECT", "AUTH",
)

# The bits of the fixed header (2.1.3), of CONNECT's flags (3.1.2.3) and of
# CONNACK's (3.2.2.1) are written where the codec reads and writes them
# (packets.py), with the section they come from.

# One PUBLISH's QoS, RETAIN and DUP flags and its packet identifier packed
# into one small int (below 2**22), as the encoders read them
# (packets.encode_publish_parts) and as the broker keeps them per delivery
# (common/broker/delivery.py, whose own state and shared bits are 3-5: the
# state SENT is the DUP bit, so a sent delivery's bits are those of its resend).
PUBLISH_QOS_MASK = const(0x03)
PUBLISH_RETAIN = const(0x04)
PUBLISH_DUP = const(0x08)
PUBLISH_PID_SHIFT = const(6)

# Subscription options byte (3.8.3.1); in 3.1.1 only the QoS bits exist.
SUBOPT_QOS_MASK = const(0x03)
SUBOPT_NO_LOCAL = const(0x04)
SUBOPT_RETAIN_AS_PUBLISHED = const(0x08)
SUBOPT_RETAIN_HANDLING_MASK = const(0x30)
SUBOPT_RETAIN_HANDLING_SHIFT = const(4)
# Retain Handling 0: send retained messages at subscribe
RETAIN_HANDLING_SEND_IF_NEW = const(1)  # only if the subscription is new
RETAIN_HANDLING_DONT_SEND = const(2)

# Limits of the encoding (1.5)
VBI_MAX = const(268435455)  # largest Variable Byte Integer, 0xFF 0xFF 0xFF 0x7F
U16_MAX = const(65535)
U32_MAX = 4294967295  # not a const: above the small-int range of 32-bit ports

# ---------------------------------------------------------------------------
# MQTT 5.0 reason codes (2.4): the ones Siskin sends, reads or tests by name.
# Each name costs a board RAM (a global and its string), so the others are
# only listed: 0x00-0x02 Granted QoS 0-2, 0x8A Banned, 0x96 Message rate too
# high, 0x99 Payload format invalid, 0x9C Use another server, 0x9D Server
# moved, 0x9F Connection rate exceeded, 0xA0 Maximum connect time.
# ---------------------------------------------------------------------------
RC_SUCCESS = const(0x00)
RC_NORMAL_DISCONNECTION = const(0x00)
RC_DISCONNECT_WITH_WILL = const(0x04)
RC_NO_MATCHING_SUBSCRIBERS = const(0x10)
RC_NO_SUBSCRIPTION_EXISTED = const(0x11)
RC_CONTINUE_AUTHENTICATION = const(0x18)
RC_REAUTHENTICATE = const(0x19)
RC_UNSPECIFIED_ERROR = const(0x80)
RC_MALFORMED_PACKET = const(0x81)
RC_PROTOCOL_ERROR = const(0x82)
RC_IMPLEMENTATION_SPECIFIC_ERROR = const(0x83)
RC_UNSUPPORTED_PROTOCOL_VERSION = const(0x84)
RC_CLIENT_IDENTIFIER_NOT_VALID = const(0x85)
RC_BAD_USER_NAME_OR_PASSWORD = const(0x86)
RC_NOT_AUTHORIZED = const(0x87)
RC_SERVER_UNAVAILABLE = const(0x88)
RC_SERVER_BUSY = const(0x89)
RC_SERVER_SHUTTING_DOWN = const(0x8B)
RC_BAD_AUTHENTICATION_METHOD = const(0x8C)
RC_KEEP_ALIVE_TIMEOUT = const(0x8D)
RC_SESSION_TAKEN_OVER = const(0x8E)
RC_TOPIC_FILTER_INVALID = const(0x8F)
RC_TOPIC_NAME_INVALID = const(0x90)
RC_PACKET_IDENTIFIER_IN_USE = const(0x91)
RC_PACKET_IDENTIFIER_NOT_FOUND = const(0x92)
RC_RECEIVE_MAXIMUM_EXCEEDED = const(0x93)
RC_TOPIC_ALIAS_INVALID = const(0x94)
RC_PACKET_TOO_LARGE = const(0x95)
RC_QUOTA_EXCEEDED = const(0x97)
RC_ADMINISTRATIVE_ACTION = const(0x98)
RC_RETAIN_NOT_SUPPORTED = const(0x9A)
RC_QOS_NOT_SUPPORTED = const(0x9B)
RC_SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = const(0x9E)
RC_SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = const(0xA1)
RC_WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = const(0xA2)

# Which reason codes each v5 packet may carry (the tables of 3.2.2.2, 3.4.2.1,
# 3.5.2.1, 3.6.2.1, 3.7.2.1, 3.9.3, 3.11.3, 3.14.2.1, 3.15.2.1). Tuples, not
# sets: tiny, ordered, and free of hashing on MicroPython.
REASONS_CONNACK = (
    0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A,
    0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
)
REASONS_PUBACK = (0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99)  # and PUBREC
REASONS_PUBREL = (0x00, 0x92)  # and PUBCOMP
REASONS_SUBACK = (
    0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2,
)
REASONS_UNSUBACK = (0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91)
REASONS_DISCONNECT = (
    0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F,
    0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D,
    0x9E, 0x9F, 0xA0, 0xA1, 0xA2,
)
REASONS_AUTH = (0x00, 0x18, 0x19)

# ---------------------------------------------------------------------------
# MQTT 3.1.1 CONNACK return codes (3.1.1 section 3.2.2.3) and SUBACK failure
# ---------------------------------------------------------------------------
CONNACK_ACCEPTED = const(0x00)
CONNACK_REFUSED_PROTOCOL_VERSION = const(0x01)
CONNACK_REFUSED_IDENTIFIER_REJECTED = const(0x02)
CONNACK_REFUSED_SERVER_UNAVAILABLE = const(0x03)
CONNACK_REFUSED_BAD_USERNAME_PASSWORD = const(0x04)
CONNACK_REFUSED_NOT_AUTHORIZED = const(0x05)
RETURN_CODES_CONNACK_311 = (0x00, 0x01, 0x02, 0x03, 0x04, 0x05)
SUBACK_FAILURE_311 = const(0x80)
RETURN_CODES_SUBACK_311 = (0x00, 0x01, 0x02, 0x80)  # [MQTT-3.9.3-2]

# ---------------------------------------------------------------------------
# MQTT 5.0 property identifiers (2.2.2.2)
# ---------------------------------------------------------------------------
PROP_PAYLOAD_FORMAT_INDICATOR = const(0x01)
PROP_MESSAGE_EXPIRY_INTERVAL = const(0x02)
PROP_CONTENT_TYPE = const(0x03)
PROP_RESPONSE_TOPIC = const(0x08)
PROP_CORRELATION_DATA = const(0x09)
PROP_SUBSCRIPTION_IDENTIFIER = const(0x0B)
PROP_SESSION_EXPIRY_INTERVAL = const(0x11)
PROP_ASSIGNED_CLIENT_IDENTIFIER = const(0x12)
PROP_SERVER_KEEP_ALIVE = const(0x13)
PROP_AUTHENTICATION_METHOD = const(0x15)
PROP_AUTHENTICATION_DATA = const(0x16)
PROP_REQUEST_PROBLEM_INFORMATION = const(0x17)
PROP_WILL_DELAY_INTERVAL = const(0x18)
PROP_REQUEST_RESPONSE_INFORMATION = const(0x19)
PROP_RESPONSE_INFORMATION = const(0x1A)
PROP_SERVER_REFERENCE = const(0x1C)
PROP_REASON_STRING = const(0x1F)
PROP_RECEIVE_MAXIMUM = const(0x21)
PROP_TOPIC_ALIAS_MAXIMUM = const(0x22)
PROP_TOPIC_ALIAS = const(0x23)
PROP_MAXIMUM_QOS = const(0x24)
PROP_RETAIN_AVAILABLE = const(0x25)
PROP_USER_PROPERTY = const(0x26)
PROP_MAXIMUM_PACKET_SIZE = const(0x27)
PROP_WILDCARD_SUBSCRIPTION_AVAILABLE = const(0x28)
PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE = const(0x29)
PROP_SHARED_SUBSCRIPTION_AVAILABLE = const(0x2A)

# Property data types (2.2.2.2, 1.5)
PT_BYTE = const(1)  # Byte
PT_U16 = const(2)  # Two Byte Integer
PT_U32 = const(3)  # Four Byte Integer
PT_VBI = const(4)  # Variable Byte Integer
PT_STR = const(5)  # UTF-8 Encoded String
PT_BIN = const(6)  # Binary Data
PT_PAIR = const(7)  # UTF-8 String Pair
