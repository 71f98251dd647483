# The firmware: start-up (firmware/startup.py: config -> store -> broker ->
# network shell, the start-up's code unloaded, the TLS room checked; then
# firmware/netup.py: watchdog -> Wi-Fi), then serve; a fatal error is logged
# and the board restarted.
#
#   on a board:     main.py calls run() (config /siskin.json)
#   on unix:        micropython firmware/main.py --config path.json [--port N]
#                   [--board NAME|PATH] [--heap-report S]
#
# The unix port takes the same path without the board-only parts (no
# `network`, no machine.WDT, no machine.reset: see firmware/board.py), which
# is how the tests run the firmware.

import asyncio
import gc
import sys

# The broker's modules first, from the top level: they import one another
# several levels deep, each level of a nested import takes C stack, and the
# 32-bit unix port (40 KB of it) ran out when they came in under the shell's,
# and again under broker's own chain (broker -> handle_connect ->
# handle_subscribe -> outbox -> egress -> packets): its deepest links first.
from common.mqtt import packets  # noqa: F401

# isort: split
from common.broker import egress  # noqa: F401

# isort: split
from common.broker import broker  # noqa: F401
from common.broker.limits import ConfigError
from firmware import board
from firmware.shell import Log


def build(argv, root):
    """(server, log) ready to run, from the command line and config: the
    start-up, firmware/startup.py build(), which unloads itself with the rest
    of what runs only to start. Called through this function (not imported
    into run()) so that nothing refers to its code once it returns."""
    from firmware.startup import build

    return build(argv, root)


def _stop(log, why):
    """A start-up failure that every reset would repeat: say why and stay at
    the REPL so the file can be fixed (mpremote, docs/boards.md); exit 2 on
    the unix port. (On a board sys.exit would soft-reboot into main.py
    again: a loop.) The watchdog is not running yet (firmware/netup.py)."""
    log.log(40, why)
    if board.is_board():
        return 2
    sys.exit(2)


def run(argv=None, root=""):
    """Run the broker until interrupted; restart the board on a fatal error."""
    log = Log("info")
    if not board.has_sockets():
        # A board without a network stack (a plain Pico): nothing to listen
        # on. Serial-only: say so and leave the REPL to the user, no loop.
        log.log(
            30,
            "serial-only: %s has no network stack (no socket module), so the broker does not start;"
            " the REPL is yours (docs/boards.md)" % board.machine_name(),
        )
        return 2
    try:
        server, log = build(sys.argv[1:] if argv is None else argv, root)
    except ConfigError as e:
        return _stop(log, "config: %s" % e)
    except MemoryError as e:
        # The same board file on the same heap runs out at the same place
        # after every reset: a reset loop that never serves. Stop instead.
        gc.collect()
        free, used = gc.mem_free(), gc.mem_alloc()
        return _stop(
            log,
            "out of memory at start-up (%r; %d B of the %d B heap free now): lower the board file's limits"
            " (max_connections, max_subscriptions, max_messages, max_retained) or set \"prealloc\": false"
            " (docs/boards.md, RAM budget)" % (e, free, free + used),
        )
    except Exception as e:  # e.g. Wi-Fi that did not come up: a reset may help
        log.log(40, "fatal at start-up: %r; restarting" % (e,))
        sys.print_exception(e)
        board.reset(log)
    try:
        try:
            asyncio.run(server.serve())
        except KeyboardInterrupt:
            # Ctrl-C at the REPL, SIGINT on the unix port: stop gracefully
            # (the tasks of the interrupted loop are still queued).
            asyncio.run(server.stop("interrupted"))
    except Exception as e:
        log.log(40, "fatal: %r; restarting" % (e,))
        sys.print_exception(e)
        board.reset(log)
    return 0
