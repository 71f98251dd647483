"""Public constants of MQTT-SN v1.2 (OASIS MQTT-SN Protocol Specification
Version 1.2, November 2013): message types (§5.2.2, table 3), flag bits
(§5.3.4), topic id types and return codes (§5.3.10). Public names so other
modules can import them on MicroPython (``_X = const()`` names cannot be)."""

from common.compat import const

# Message types, §5.2.2 table 3
ADVERTISE = const(0x00)
SEARCHGW = const(0x01)
GWINFO = const(0x02)
CONNECT = const(0x04)
CONNACK = const(0x05)
WILLTOPICREQ = const(0x06)
WILLTOPIC = const(0x07)
WILLMSGREQ = const(0x08)
WILLMSG = const(0x09)
REGISTER = const(0x0A)
REGACK = const(0x0B)
PUBLISH = const(0x0C)
PUBACK = const(0x0D)
PUBCOMP = const(0x0E)
PUBREC = const(0x0F)
PUBREL = const(0x10)
SUBSCRIBE = const(0x12)
SUBACK = const(0x13)
UNSUBSCRIBE = const(0x14)
UNSUBACK = const(0x15)
PINGREQ = const(0x16)
PINGRESP = const(0x17)
DISCONNECT = const(0x18)
WILLTOPICUPD = const(0x1A)
WILLTOPICRESP = const(0x1B)
WILLMSGUPD = const(0x1C)
WILLMSGRESP = const(0x1D)
ENCAPSULATED = const(0xFE)  # §5.5 forwarder encapsulation: refused (no forwarders)

# Flags byte, §5.3.4
FLAG_DUP = const(0x80)
FLAG_QOS_MASK = const(0x60)
FLAG_RETAIN = const(0x10)
FLAG_WILL = const(0x08)
FLAG_CLEAN = const(0x04)
FLAG_TOPIC_ID_TYPE = const(0x03)

# TopicIdType, §5.3.4 bits 1-0 (0b11 is reserved)
TOPIC_NORMAL = const(0)
TOPIC_PREDEFINED = const(1)
TOPIC_SHORT = const(2)

# QoS level -1 ("publish without connection", §6.8) is coded 0b11 in the flags
QOS_MINUS_ONE = const(-1)

# ReturnCode, §5.3.10
RC_ACCEPTED = const(0x00)
RC_CONGESTION = const(0x01)
RC_INVALID_TOPIC_ID = const(0x02)
RC_NOT_SUPPORTED = const(0x03)

PROTOCOL_ID = const(0x01)  # §5.3.9: the only value v1.2 defines

# The longest datagram the 3-octet length form can describe (§5.2.1)
MAX_LENGTH = const(0xFFFF)
