"""Every shim that lets the core run unchanged on CPython and MicroPython.

Rules (see ../docs/architecture.md and the CONVENTIONS):
- feature detection only, never platform checks: we try a thing and keep what works;
- nothing here does I/O or reads a clock; the shells own those;
- import-time work is limited to a few cheap probes whose results are constants.

What lives here:
- ``const``: MicroPython's compile-time constant marker; the identity on CPython.
- ``STRICT_UTF8_DECODE``: True when ``str(b, "utf-8")`` already rejects every byte
  sequence that the MQTT UTF-8 rules reject (except U+0000, which no standard
  decoder refuses). CPython's decoder is strict; MicroPython's is lax (it accepts
  overlong forms, surrogates and code points above U+10FFFF), so there the codec
  runs our own validator (common/mqtt/utf8.py) on every string.
- ``STRUCT_ERROR``: the exception ``struct`` raises on a short buffer
  (``struct.error`` on CPython, ``ValueError`` on MicroPython).
- ``print_exception``: ``sys.print_exception`` on MicroPython, a ``traceback``
  based stand-in on CPython (imported lazily, so the core imports no I/O module).
- ``crc32``: ``binascii.crc32`` where the port has a correct one, else a
  table-driven one in Python (the store's record checksum, common/store/kvrecord.py).
- ``JOIN_PARTS_FASTER``: True where building a small packet by joining bytes
  parts beats filling a preallocated bytearray (CPython: about a third faster;
  on MicroPython the bytearray takes fewer heap blocks, measured by
  tools/bench/upy_heap.py). A trait of the interpreter, not a feature that can
  be probed: the one implementation check of the core, kept here.
- ``unload``: drop a module that ran its once-only work (start-up, restore)
  from ``sys.modules`` and from its package, so that its code leaves a board's
  heap once nothing else refers to it (a later import loads it again).
- ``from_hex``: ``bytes.fromhex`` where the port has it (MicroPython builds
  below the "extra features" level do not), else ``binascii.unhexlify``; both
  raise ValueError on text that is not hex digits.
"""

try:  # MicroPython
    from micropython import const  # type: ignore[import-not-found]
except ImportError:  # CPython

    def const(value):  # type: ignore[no-redef]
        """Identity on CPython; MicroPython folds the value at compile time."""
        return value


import struct
import sys

STRUCT_ERROR = getattr(struct, "error", ValueError)


JOIN_PARTS_FASTER = sys.implementation.name == "cpython"


# Byte sequences that the MQTT UTF-8 rules forbid [MQTT-1.5.4-1] and that a
# strict decoder must refuse: an overlong NUL, an overlong '/', a UTF-16
# surrogate (U+D800), a code point above U+10FFFF, a truncated 3-byte sequence,
# a stray continuation byte.
UTF8_PROBES = (
    b"\xc0\x80",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\x80",
)


def probe_strict_utf8():
    """Return True if this interpreter's UTF-8 decoder refuses every probe.

    Feature detection, not a platform check: a MicroPython build that one day
    ships a strict decoder would get the fast path automatically.
    """
    for probe in UTF8_PROBES:
        try:
            str(probe, "utf-8")
        except UnicodeError:
            continue
        except ValueError:  # some builds raise a plain ValueError
            continue
        return False
    try:
        str(b"\xe2\x82\xac\xf0\x9f\x98\x80", "utf-8")  # a valid euro sign + emoji
    except (UnicodeError, ValueError):
        return False
    return True


STRICT_UTF8_DECODE = probe_strict_utf8()


try:  # MicroPython
    from sys import print_exception  # type: ignore[attr-defined]
except ImportError:  # CPython

    def print_exception(exc, file=None):  # type: ignore[misc]
        """Print a traceback like MicroPython's ``sys.print_exception``."""
        import traceback  # lazy: traceback pulls in linecache/os

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=file)


# Millisecond ticks that wrap, as MicroPython's time.ticks_ms() does. The
# shells hand the core their ticks masked to 30 bits (TICKS_MASK), which is
# a whole period on every port (2**30 on 32-bit boards, 2**62 on the 64-bit
# unix port) and keeps every value a small int. A difference is right while
# the two times are less than 2**29 ms (6 days) apart.
TICKS_MASK = const(0x3FFFFFFF)
_TICKS_HALF = const(0x20000000)


def ticks_diff(a, b):
    """a - b in ms for 30-bit wrapping ticks (time.ticks_diff of MicroPython)."""
    return ((a - b + _TICKS_HALF) & TICKS_MASK) - _TICKS_HALF


def ticks_deadline(t, ms):
    """The tick `ms` after tick `t`, as a deadline: 0 means "none", so never 0."""
    return ((t + ms) & TICKS_MASK) or 1


def ticks_sooner(a, b):
    """The earlier of two deadlines in ticks; 0 means none."""
    if not a or (b and ticks_diff(b, a) < 0):
        return b
    return a


# crc32(data, crc=0): CRC-32 of `data` (bytes, bytearray or memoryview),
# continuing from `crc`, unsigned. binascii's itself where it gives the
# standard check value (unsigned: a port that returns a signed one fails
# the check), so the store's per-record checksum costs no call of ours;
# else a table-driven one in Python, defined only then (on a port with a
# correct one its code is dropped after this module's import).
try:
    from binascii import crc32

    if crc32(b"123456789") != 0xCBF43926:  # the standard check value
        raise ImportError
except ImportError:
    _crc_table = None

    def crc32(data, crc=0):
        """Table-driven CRC-32 (IEEE 802.3, as zlib), for ports without a correct binascii.crc32."""
        global _crc_table
        if _crc_table is None:
            table = []
            for n in range(256):
                c = n
                for _ in range(8):
                    if c & 1:
                        c = 0xEDB88320 ^ (c >> 1)
                    else:
                        c >>= 1
                table.append(c)
            _crc_table = table
        table = _crc_table
        c = crc ^ 0xFFFFFFFF
        for b in data:
            c = table[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF


try:
    from_hex = bytes.fromhex
except AttributeError:
    from binascii import unhexlify as from_hex  # noqa: F401  (MicroPython without bytes.fromhex)


def unload(name):
    """Forget module `name` (see the module doc); nothing if it is not loaded."""
    if sys.modules.pop(name, None) is None:
        return
    i = name.rfind(".")
    parent = sys.modules.get(name[:i]) if i > 0 else None
    if parent is not None and hasattr(parent, name[i + 1 :]):
        delattr(parent, name[i + 1 :])
