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


def run(argv=None, root=""):
    """Run the broker until interrupted; restart the board on a fatal error."""
    log = Log("info")
    # A start that fails the same way after every reset stops at the REPL
    # (firmware/start_failed.py, loaded only then).
    if not board.has_sockets():
        from firmware.start_failed import serial_only

        return serial_only(log)
    try:
        server, log = build(sys.argv[1:] if argv is None else argv, root)
    except ConfigError as e:
        from firmware.start_failed import stop

        return stop(log, "config: %s" % e)
    except MemoryError as e:
        gc.collect()  # (the failed start's heap back, for the module's import)
        from firmware.start_failed import out_of_memory

        return out_of_memory(log, e)
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
