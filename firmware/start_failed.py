# A start-up that fails in a way every reset would repeat (firmware/app.py
# run: a config error, the heap too small for the board file, a board
# without a network stack): say why and stay at the REPL so the file can be
# fixed (mpremote, docs/boards.md). Loaded only then: a serving board keeps
# none of these words.

import gc
import sys

from firmware import board


def stop(log, why):
    """Log `why` and stay at the REPL (2); exit 2 on the unix port. (On a
    board sys.exit would soft-reboot into main.py again: a loop.) The
    watchdog is not running yet (firmware/netup.py)."""
    log.log(40, why)
    if board.is_board():
        return 2
    sys.exit(2)


def out_of_memory(log, e):
    """The same board file on the same heap runs out at the same place
    after every reset: a reset loop that never serves. Stop instead."""
    gc.collect()
    free, used = gc.mem_free(), gc.mem_alloc()
    return stop(
        log,
        "out of memory at start-up (%r; %d B of the %d B heap free now): lower the board file's limits"
        ' (max_connections, max_subscriptions, max_messages, max_retained) or set "prealloc": false'
        " (docs/boards.md, RAM budget)" % (e, free, free + used),
    )


def serial_only(log):
    """A board without a network stack (a plain Pico): nothing to listen
    on. Say so and leave the REPL to the user, no loop."""
    log.log(
        30,
        "serial-only: %s has no network stack (no socket module), so the broker does not start;"
        " the REPL is yours (docs/boards.md)" % board.machine_name(),
    )
    return 2
