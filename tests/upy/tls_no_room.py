# The firmware (firmware/main.py's path into firmware/app.py) with its heap
# left in pieces just before the start-up's TLS room check: what a board whose
# free heap is scattered looks like, made on purpose instead of found by
# trying heap sizes (where the free blocks lie after start-up depends on the
# path lengths, the environment and the import order, not on the heap size
# alone: tests/host/test_firmware_tls.py, test_firmware_bridge_tls.py).
#
#   micropython -X heapsize=HEAP tests/upy/tls_no_room.py --config siskin.json [--port N]
#
# firmware.tls.tls_room is wrapped: before the real one runs, the heap is
# filled with blocks of PIECE bytes until none fits, and every other one is
# let go. What is free then is about half of what start-up left, all of it
# in pieces of at most ~2 PIECEs (a freed block between two held ones, plus
# the remnant of a hole too small for one more), so no block of mbedTLS's
# 16 KB input buffer fits however the heap was laid out: the check must
# refuse, and its message says how much was free (more than a client needs,
# in pieces). The held half is let go after the check.

import gc
import sys

PIECE = 1024  # far below the 16 KB block the check asks for


def _root():
    here = __file__
    i = here.rfind("/tests/upy/")
    return here[:i] if i >= 0 else "."


ROOT = _root()
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from firmware import app, tls  # noqa: E402

_real_tls_room = tls.tls_room


def tls_room_in_pieces(per_client, biggest, most):
    gc.collect()
    held = [None] * (gc.mem_free() // PIECE + 1)  # sized first: a growing list could fail the fill early
    n = 0
    try:
        while n < len(held):
            held[n] = bytearray(PIECE)
            n += 1
    except MemoryError:
        pass
    for i in range(0, n, 2):
        held[i] = None  # garbage: the real check's gc.collect() frees it
    room = _real_tls_room(per_client, biggest, most)
    held = None
    return room


tls.tls_room = tls_room_in_pieces
app.run(root=ROOT)
