# The protobuf wire format, as much of it as Sparkplug B needs (sparkplug.py,
# spb_node.py): fields (their varints are codec.py's), a Payload's timestamp replaced, and the encoders of
# a Payload with its Metrics (Eclipse Tahu's sparkplug_b.proto: Payload
# timestamp = 1, metrics = 2, seq = 3; Metric name = 1, alias = 2,
# datatype = 4, long_value = 11, boolean_value = 14). A message's fields
# are written in field order into one bytearray; nothing else is allocated
# but the metric's own body.

from common.compat import const
from common.mqtt.codec import read_varint, write_varint

# Sparkplug B data types (spec 6.4.16) used here.
INT64 = const(4)
UINT64 = const(8)
BOOLEAN = const(11)

_TIMESTAMP = const(0x08)  # field 1, varint
_METRICS = const(0x12)  # field 2, length-delimited
_SEQ = const(0x18)  # field 3, varint
_NAME = const(0x0A)  # Metric field 1, length-delimited
_ALIAS = const(0x10)  # Metric field 2, varint
_DATATYPE = const(0x20)  # Metric field 4, varint
_LONG = const(0x58)  # Metric field 11, varint
_BOOL = const(0x70)  # Metric field 14, varint


def read_field(buf, i, end):
    """(key, value, next offset) of the field at buf[i]: a varint's value,
    a length-delimited field's start (its end is the next offset), else 0;
    -1 offset: malformed (a group, field 0, past `end`)."""
    key, i = read_varint(buf, i, end)
    if i < 0 or key >> 3 == 0:
        return 0, 0, -1
    wire = key & 7
    value = 0
    if wire == 0:
        value, i = read_varint(buf, i, end)
    elif wire == 1:
        i += 8
    elif wire == 5:
        i += 4
    elif wire == 2:
        size, i = read_varint(buf, i, end)
        value = i
        if i >= 0:
            i += size
    else:
        return 0, 0, -1
    return key, value, i if i <= end else -1


def stamp(payload, ms):
    """`payload` (a Sparkplug B Payload) with timestamp = `ms` (field 1
    first, every other field as it was, in order); None if it does not
    parse as protobuf."""
    out = bytearray(b"\x08")
    write_varint(out, ms)
    i = 0
    end = len(payload)
    while i < end:
        start = i
        key, _, i = read_field(payload, i, end)
        if i < 0:
            return None
        if key != _TIMESTAMP:  # (the old timestamp left out)
            out.extend(payload[start:i])
    return bytes(out)


def has_true_metric(payload, name):
    """Whether the Payload holds the Metric `name` with boolean_value true
    (an NCMD's "Node Control/Rebirth"); False if it does not parse."""
    want = name.encode()
    i = 0
    end = len(payload)
    while i < end:
        key, at, i = read_field(payload, i, end)
        if i < 0:
            return False
        if key != _METRICS:
            continue
        named = False
        true = False
        j = at
        while j < i:
            mkey, value, j = read_field(payload, j, i)
            if j < 0:
                return False
            if mkey == _NAME:
                named = payload[value:j] == want
            elif mkey == _BOOL:
                true = value == 1
        if named and true:
            return True
    return False


def payload_start(ms):
    """A new Payload bytearray holding its timestamp (`ms`; None: no field)."""
    out = bytearray()
    if ms is not None:
        out.append(_TIMESTAMP)
        write_varint(out, ms)
    return out


def add_metric(out, name, alias, datatype, value):
    """Append a Metric to the Payload `out`: its `name` (None: by alias
    only, as in a DATA message after the birth), `alias` (0: none), and
    `value` as long_value (INT64, UINT64; >= 0) or boolean_value."""
    body = bytearray()
    if name is not None:
        raw = name.encode()
        body.append(_NAME)
        write_varint(body, len(raw))
        body.extend(raw)
    if alias:
        body.append(_ALIAS)
        write_varint(body, alias)
    body.append(_DATATYPE)
    write_varint(body, datatype)
    if datatype == BOOLEAN:
        body.append(_BOOL)
        body.append(1 if value else 0)
    else:
        body.append(_LONG)
        write_varint(body, value)
    out.append(_METRICS)
    write_varint(out, len(body))
    out.extend(body)


def add_seq(out, seq):
    """Append the Payload's seq (after its metrics: field order)."""
    out.append(_SEQ)
    write_varint(out, seq)
