"""Wire primitives of MQTT (1.5) and the incremental, bounded frame reader.

Theory of operation
-------------------
Decoders take ``(buf, start, end)``: ``buf`` is any bytes-like object (usually
``FrameReader.buf``), ``start`` the offset to read at and ``end`` the limit
the value must fit in (the end of the packet, or of the property block). They
return ``(value, new_offset)`` and raise ``MalformedPacket`` when the value
would run past ``end`` -- truncation inside a packet whose length the fixed
header announced is a malformed packet, never "need more data". Offsets are
plain ints: no memoryview is sliced (each slice allocates on MicroPython).

Encoders work in two passes: the packet encoder adds up the sizes
(``vbi_size``, ``len`` of the UTF-8 bytes), allocates one ``bytearray`` of the
exact size with ``new_packet_buffer`` and fills it front to back with the
``write_*`` helpers, which take ``(buf, offset, value)`` and return the new
offset (``struct.pack_into`` for the integers).

``FrameReader`` turns a byte stream cut in arbitrary chunks into frames
``(first_byte, body_start, body_end)`` indexing ``reader.buf``. It reads the
fixed header only (first byte + Remaining Length) and refuses a packet larger
than ``max_packet_size`` (the whole packet, fixed header included, as in
MQTT 5.0 3.1.2.11.4) as soon as the header is complete: the body of a packet
that announces 256 MB is never buffered. Buffer discipline: packets that
arrive whole are framed in the caller's own buffer (no copy, no
allocation); only a packet cut by the chunking is copied into a bytearray of
the reader's own (``keep``). A frame's offsets are valid until the next
``feed`` or ``keep``, and nothing may keep a view of a frame (payloads are
copied out: ``take_bytes``).
"""

import struct

from common.compat import const
from common.mqtt.errors import MalformedPacket, PacketTooLarge, ProtocolError
from common.mqtt.utf8 import decode_utf8

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_U16_MAX = const(65535)
_VBI_MAX = const(268435455)

# ---------------------------------------------------------------------------
# Decoding primitives
# ---------------------------------------------------------------------------


def decode_u8(buf, start, end):
    """One byte."""
    if start >= end:
        raise MalformedPacket("truncated byte")
    return buf[start], start + 1


def decode_u16(buf, start, end):
    """Two Byte Integer, big-endian (1.5.2)."""
    if start + 2 > end:
        raise MalformedPacket("truncated two byte integer")
    return (buf[start] << 8) | buf[start + 1], start + 2


def decode_u32(buf, start, end):
    """Four Byte Integer, big-endian (1.5.3). May exceed the small-int range
    of 32-bit ports (0xFFFFFFFF lives on the heap there)."""
    if start + 4 > end:
        raise MalformedPacket("truncated four byte integer")
    return struct.unpack_from("!I", buf, start)[0], start + 4


def decode_vbi(buf, start, end):
    """Variable Byte Integer (1.5.5) inside a packet.

    At most four bytes: a fifth byte is malformed. The encoding must be the
    minimal one [MQTT-1.5.5-1]: a last byte of 0x00 after a continuation
    (e.g. 0x80 0x00 for 0) is malformed.
    """
    value = 0
    shift = 0
    i = start
    while True:
        if i >= end:
            raise MalformedPacket("truncated variable byte integer")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift == 28:
            raise MalformedPacket("variable byte integer longer than 4 bytes")
    if b == 0 and i - start > 1:
        raise MalformedPacket("non-minimal variable byte integer")  # [MQTT-1.5.5-1]
    return value, i


def decode_str(buf, start, end):
    """UTF-8 Encoded String (1.5.4): two-byte length, then MQTT UTF-8 bytes."""
    if start + 2 > end:
        raise MalformedPacket("truncated string length")
    n = (buf[start] << 8) | buf[start + 1]
    a = start + 2
    b = a + n
    if b > end:
        raise MalformedPacket("string runs past the end")
    return decode_utf8(buf, a, b), b


def decode_bin(buf, start, end):
    """Binary Data (1.5.6): two-byte length, then that many bytes."""
    if start + 2 > end:
        raise MalformedPacket("truncated binary length")
    n = (buf[start] << 8) | buf[start + 1]
    a = start + 2
    b = a + n
    if b > end:
        raise MalformedPacket("binary data runs past the end")
    return take_bytes(buf, a, b), b


def decode_str_pair(buf, start, end):
    """UTF-8 String Pair (1.5.7): ``(name, value)``."""
    name, i = decode_str(buf, start, end)
    value, i = decode_str(buf, i, end)
    return (name, value), i


def take_bytes(buf, start, end):
    """An immutable copy of buf[start:end] (the payload outlives the frame)."""
    if type(buf) is bytes:
        return buf[start:end]
    return bytes(buf[start:end])


def check_end(i, end):
    """A packet body must be consumed exactly: leftovers are malformed."""
    if i != end:
        raise MalformedPacket("bytes left over in the packet")


def decode_packet_id(buf, start, end):
    """A non-zero Packet Identifier (2.2.1)."""
    pid, i = decode_u16(buf, start, end)
    if pid == 0:
        # [MQTT-2.3.1-1] a packet that needs an identifier has a non-zero one
        raise ProtocolError("packet identifier 0")
    return pid, i


# ---------------------------------------------------------------------------
# Encoding primitives
# ---------------------------------------------------------------------------


def vbi_size(value):
    """Bytes needed to encode value as a Variable Byte Integer."""
    if value < 128:
        return 1
    if value < 16384:
        return 2
    if value < 2097152:
        return 3
    if value <= _VBI_MAX:
        return 4
    raise ValueError("value too large for a variable byte integer")


def utf8_bytes(s):
    """A str as UTF-8 bytes (bytes pass through unchanged)."""
    if isinstance(s, str):
        return s.encode("utf-8")
    return s


def write_u8(buf, off, value):
    buf[off] = value
    return off + 1


def write_u16(buf, off, value):
    struct.pack_into("!H", buf, off, value)
    return off + 2


def write_u32(buf, off, value):
    struct.pack_into("!I", buf, off, value)
    return off + 4


def write_vbi(buf, off, value):
    """Minimal Variable Byte Integer encoding [MQTT-1.5.5-1]."""
    if value < 0 or value > _VBI_MAX:
        raise ValueError("value out of range for a variable byte integer")
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            buf[off] = b | 0x80
            off += 1
        else:
            buf[off] = b
            return off + 1


# Base-128 varints of any length (protobuf's; MQTT's VBI above stops at 4
# bytes): the store's records (store.py, store_open.py) and Sparkplug's
# payloads (broker/protobuf.py).


def read_varint(buf, i, end):
    """(value, next offset) of the varint at buf[i] (at most 10 bytes, before
    `end`); -1 offset: malformed or truncated."""
    value = 0
    shift = 0
    while i < end and shift < 70:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
    return 0, -1


def write_varint(out, value):
    """Append `value` (>= 0) to the bytearray `out` as a varint."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_raw(buf, off, data):
    n = len(data)
    buf[off:off + n] = data
    return off + n


def write_prefixed(buf, off, data):
    """Two-byte length then the bytes (strings already UTF-8 encoded, binary)."""
    n = len(data)
    if n > _U16_MAX:
        raise ValueError("string or binary data longer than 65535 bytes")
    buf[off] = n >> 8
    buf[off + 1] = n & 0xFF
    off += 2
    buf[off:off + n] = data
    return off + n


def new_packet_buffer(first_byte, remaining_length):
    """Allocate the whole packet once and write its fixed header.

    Returns ``(buf, offset)`` with ``offset`` at the start of the variable
    header; the caller must fill exactly ``remaining_length`` bytes.
    """
    buf = bytearray(1 + vbi_size(remaining_length) + remaining_length)
    buf[0] = first_byte
    return buf, write_vbi(buf, 1, remaining_length)


# ---------------------------------------------------------------------------
# Incremental frame reader
# ---------------------------------------------------------------------------


class FrameReader:
    """Split a byte stream into MQTT frames, enforcing a maximum packet size.

    ``feed(data)`` hands over received bytes; ``next_frame()`` returns -1
    when more bytes are needed, or the next frame's first byte with the
    body at ``self.buf[self.start:self.stop]`` (``maybe_read_frame()``: the
    same as a tuple, or None). Raises ``MalformedPacket`` for a bad
    Remaining Length and ``PacketTooLarge`` (0x95) for a packet above
    ``max_packet_size``, both as soon as the fixed header shows it. After an
    error the stream is unusable (the connection must be closed).

    No copy while packets arrive whole: with nothing pending, ``feed``
    frames the caller's ``data`` itself (``self.buf is data``), so a frame
    is valid only while the caller's buffer is (a shell reads into one
    buffer again and again). Before that buffer may change, ``keep()``
    copies the bytes not yet framed (a packet cut by the chunking) into a
    bytearray of the reader's own, and the next ``feed`` appends to it.
    """

    __slots__ = ("buf", "max_packet_size", "own", "pos", "start", "stop")  # one per connection: no dict on CPython

    def __init__(self, max_packet_size=_VBI_MAX + 5):
        self.max_packet_size = max_packet_size
        self.buf = b""  # what frames index: the caller's data, or `own`
        self.own = None  # a bytearray of the reader's own while a packet is cut
        self.pos = 0  # offset of the first byte not yet returned in a frame
        self.start = 0  # the last frame's body: buf[start:stop]
        self.stop = 0

    def feed(self, data):
        """Hand over received bytes. Invalidates frames returned before."""
        buf = self.buf
        pos = self.pos
        if pos >= len(buf):
            # Nothing pending (the usual case): frame `data` where it is.
            self.buf = data
            self.own = None
        elif not data:
            # A held connection read again (driver._follow): what is pending
            # stays where it is. Moving it would copy up to a whole read (256
            # KB on the host) for each release of a rate-limited flooder.
            return
        else:
            own = self.own
            if buf is not own:
                # Left in a caller's buffer without keep(): immutable bytes
                # (tests, the host) are still what they were.
                own = self.own = bytearray(buf[pos:])
            elif pos:
                own[:] = own[pos:]
            own.extend(data)
            self.buf = own
        self.pos = 0

    def keep(self):
        """Copy what is not framed yet out of the caller's buffer (before
        the caller reuses it)."""
        buf = self.buf
        if buf is self.own:
            return
        pos = self.pos
        if pos < len(buf):
            self.own = bytearray(buf[pos:])
            self.buf = self.own
        else:
            self.buf = b""  # no reference left to the caller's buffer
        self.pos = 0

    def again(self):
        """Put the last frame back: the next next_frame() returns it again
        (a packet that must wait, external_auth.topics_known)."""
        self.pos = self.start - 1 - vbi_size(self.stop - self.start)

    def pending(self):
        """Number of buffered bytes not yet returned in a frame."""
        return len(self.buf) - self.pos

    def maybe_read_frame(self):
        """The next complete frame ``(first_byte, body_start, body_end)``
        indexing ``self.buf``, or None if more bytes are needed."""
        first = self.next_frame()
        if first < 0:
            return None
        return first, self.start, self.stop

    def next_frame(self):
        """The next complete frame's first byte (its body is
        ``buf[self.start:self.stop]``), or -1 if more bytes are needed.
        No tuple: the per-packet path allocates nothing here."""
        buf = self.buf
        pos = self.pos
        n = len(buf)
        i = pos + 1
        value = 0
        shift = 0
        while True:
            if i >= n:
                return -1
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift == 28:
                # The fourth byte says "more follows": no fifth byte is allowed.
                raise MalformedPacket("remaining length longer than 4 bytes")
        if b == 0 and i - pos > 2:
            raise MalformedPacket("non-minimal remaining length")  # [MQTT-1.5.5-1]
        total = i - pos + value
        if total > self.max_packet_size:
            raise PacketTooLarge("packet of %d bytes over max_packet_size %d" % (total, self.max_packet_size))
        end = pos + total
        if end > n:
            return -1
        self.pos = end
        self.start = i
        self.stop = end
        return buf[pos]
