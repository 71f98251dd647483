"""MQTT UTF-8 validation by our own code, identical on every interpreter.

Theory of operation. An MQTT UTF-8 Encoded String must be well-formed UTF-8 as
defined by RFC 3629 / Unicode [MQTT-1.5.4-1]: no surrogate code points
U+D800..U+DFFF, no overlong forms, nothing above U+10FFFF, no truncated or
stray continuation bytes; and it must not contain U+0000 [MQTT-1.5.4-2].
A receiver that sees a violation treats it as a Malformed Packet. The BOM
sequence 0xEF 0xBB 0xBF must not be skipped or stripped [MQTT-1.5.4-3]: we keep
it as U+FEFF in the decoded string (a decoder may not silently eat it).

MicroPython's ``bytes.decode`` only checks lead and continuation bytes, so it
accepts overlong forms, surrogates and code points above U+10FFFF. We therefore
validate by hand following Table 3-7 of the Unicode standard ("well-formed
UTF-8 byte sequences"), which lists, for each lead byte, the allowed range of
the second byte; the remaining continuation bytes are always 0x80..0xBF:

    lead       second      third     fourth
    00..7F
    C2..DF     80..BF
    E0         A0..BF      80..BF              (no overlong 3-byte forms)
    E1..EC     80..BF      80..BF
    ED         80..9F      80..BF              (no surrogates)
    EE..EF     80..BF      80..BF
    F0         90..BF      80..BF    80..BF    (no overlong 4-byte forms)
    F1..F3     80..BF      80..BF    80..BF
    F4         80..8F      80..BF    80..BF    (nothing above U+10FFFF)

C0, C1 and F5..FF never occur. The loop walks ``buf[start:end]`` by index
(no slicing, no allocation) and raises ``MalformedPacket`` at the first bad
byte. ``decode_utf8`` is the entry point the codec uses: on an interpreter
whose decoder is already strict (feature-detected in compat) it decodes first
and only has to look for U+0000; elsewhere it validates, then decodes.
"""

from common.compat import STRICT_UTF8_DECODE
from common.mqtt.errors import MalformedPacket


def check_utf8(buf, start, end):
    """Raise MalformedPacket unless buf[start:end] is an MQTT UTF-8 string.

    [MQTT-1.5.4-1] well-formed UTF-8 (no surrogates, no overlong forms, no code
    point above U+10FFFF, no truncated sequence); [MQTT-1.5.4-2] no U+0000.
    """
    i = start
    while i < end:
        b = buf[i]
        if b < 0x80:
            if b == 0:
                raise MalformedPacket("U+0000 in a UTF-8 string")  # [MQTT-1.5.4-2]
            i += 1
            continue
        if b < 0xC2:
            # 0x80..0xBF: stray continuation; 0xC0, 0xC1: overlong 2-byte form
            raise MalformedPacket("invalid UTF-8 lead byte")  # [MQTT-1.5.4-1]
        if b < 0xE0:
            n = 1
            lo = 0x80
            hi = 0xBF
        elif b < 0xF0:
            n = 2
            if b == 0xE0:
                lo = 0xA0  # overlong 3-byte forms
                hi = 0xBF
            elif b == 0xED:
                lo = 0x80
                hi = 0x9F  # U+D800..U+DFFF surrogates
            else:
                lo = 0x80
                hi = 0xBF
        elif b < 0xF5:
            n = 3
            if b == 0xF0:
                lo = 0x90  # overlong 4-byte forms
                hi = 0xBF
            elif b == 0xF4:
                lo = 0x80
                hi = 0x8F  # above U+10FFFF
            else:
                lo = 0x80
                hi = 0xBF
        else:
            raise MalformedPacket("invalid UTF-8 lead byte")  # [MQTT-1.5.4-1]
        if i + n >= end:  # the sequence needs bytes i..i+n
            raise MalformedPacket("truncated UTF-8 sequence")  # [MQTT-1.5.4-1]
        c = buf[i + 1]
        if c < lo or c > hi:
            raise MalformedPacket("invalid UTF-8 sequence")  # [MQTT-1.5.4-1]
        j = i + 2
        i += n + 1
        while j < i:
            c = buf[j]
            if c < 0x80 or c > 0xBF:
                raise MalformedPacket("invalid UTF-8 continuation")  # [MQTT-1.5.4-1]
            j += 1


def decode_utf8_checked(buf, start, end):
    """Validate with our own validator, then decode. Used on lax interpreters
    and directly by the tests on every interpreter."""
    check_utf8(buf, start, end)
    if start == end:
        return ""
    return str(buf[start:end], "utf-8")


def decode_utf8(buf, start, end):
    """Return buf[start:end] as a str, raising MalformedPacket if it breaks the
    MQTT UTF-8 rules [MQTT-1.5.4-1, -2]. A leading BOM is kept [MQTT-1.5.4-3]."""
    if start == end:
        return ""
    if STRICT_UTF8_DECODE:
        # (the interpreter's decoder, in line: every topic and client id comes here)
        try:
            s = str(buf[start:end], "utf-8")
        except (UnicodeError, ValueError):  # (some builds raise a plain ValueError)
            raise MalformedPacket("invalid UTF-8 string")  # [MQTT-1.5.4-1]
        if "\x00" in s:
            raise MalformedPacket("U+0000 in a UTF-8 string")  # [MQTT-1.5.4-2]
        return s
    return decode_utf8_checked(buf, start, end)
