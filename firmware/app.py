# The firmware's start-up: config -> Wi-Fi -> watchdog -> store -> broker ->
# network shell; a fatal error is logged and the board restarted.
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
import os
import sys
import time

from common.broker.broker import VERSION
from common.broker.settings import ConfigError
from common.compat import unload
from firmware import board
from firmware.shell import Log, Server, make_driver

DEFAULT_CONFIG = "/siskin.json"

# Modules that run only in build(): imported there and unloaded after it,
# so that their code does not stay in a board's heap (docs/boards.md).
STARTUP_ONLY = ("firmware.boardcfg", "firmware.storage", "common.store.storeboot")


def parse_args(argv):
    opts = {"config": DEFAULT_CONFIG, "port": None, "board": None, "heap_report": None, "root": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key = arg[2:].replace("-", "_") if arg.startswith("--") else None
        if key not in opts or i + 1 >= len(argv):
            raise ConfigError(
                "usage: main.py [--config PATH] [--port N] [--board NAME|PATH] [--heap-report S] [--root DIR]"
            )
        value = argv[i + 1]
        opts[key] = int(value) if key in ("port", "heap_report") else value
        i += 2
    return opts


def build(argv, root):
    """(server, log) ready to run, from the command line and config."""
    try:
        return _build(argv, root)
    finally:
        for name in STARTUP_ONLY:
            unload(name)


def _build(argv, root):
    from common.store.store import StoreError
    from common.store.storeboot import new_broker
    from firmware.boardcfg import board_path, load_board, load_device, load_security, load_tls
    from firmware.storage import index_keys, open_store

    args = parse_args(argv)
    cfg = load_device(args["config"])
    if args["port"] is not None:
        cfg["port"] = args["port"]
    if args["board"] is not None:
        cfg["board"] = args["board"]
    if args["heap_report"] is not None:
        cfg["server"]["heap_report"] = args["heap_report"]
    log = Log(cfg["log_level"])
    settings, opts = load_board(board_path(args["root"] or root, cfg["board"]), cfg["limits"], cfg["server"])
    security = load_security(cfg)
    tls = load_tls(cfg, args["config"])
    log.log(20, "siskin %s on %s (board settings: %s)" % (VERSION, sys.platform, cfg["board"]))
    wdt = board.start_watchdog(cfg["watchdog_ms"], log)
    feed = wdt.feed if wdt is not None else None
    board.bring_up_network(cfg, log, feed)
    try:
        store = open_store(cfg, log, index_keys(settings))
    except (StoreError, ValueError) as e:
        # A wrong key or a store from a newer Siskin would fail the same way
        # after every reset: stop at the REPL instead (docs/boards.md).
        raise ConfigError("store %s: %s" % (cfg["storage"], e))
    except OSError as e:
        # A missing directory, a full or read-only file system: the same
        # after every reset too. Stop, or serve without persistence if the
        # board settings allow it (server.storage_optional).
        why = "store %s cannot be opened (%r)" % (cfg["storage"], e)
        if not opts["storage_optional"]:
            raise ConfigError(
                why + ": fix the path or the file system, set \"storage\": \"none\", or set"
                ' "storage_optional": true in the board\'s "server" settings to serve without persistence'
            )
        log.log(40, why + ": serving WITHOUT persistence (storage_optional)")
        store = None
    driver = make_driver(new_broker(settings, os.urandom, store), opts, log)
    driver.set_security(*security)
    if store is not None:
        # Wall time so that expiry counts the downtime (boards without NTP:
        # seconds since 2000 from boot, clamped by the store; see persistence.md).
        driver.restore(int(time.time()))
    server = Server(driver, opts, cfg["host"], cfg["port"], log, tls)
    server.on_tick = feed
    if cfg["bridge"]:
        # (Loaded here, not at the first connection: the bridge's code is in
        # the heap before the TLS room is measured.)
        from firmware.bridge import with_contexts

        server.bridges = with_contexts(cfg["bridge"])
    upstreams = len([1 for _b, ctx in server.bridges if ctx is not None])
    if tls is not None or upstreams:
        from firmware.tls import check_tls_room  # (TLS only: RAM)

        check_tls_room(settings.max_connections, len(server.slots) if tls is not None else 0, upstreams, log)
    log_security(driver.broker, server.loopback, cfg["host"], log)
    return server, log


def log_security(broker, loopback, host, log):
    """The start-up lines: users, ACL and the anonymous decision with why."""
    from common.broker import login

    log.log(20, "security: " + login.describe(broker))
    if not loopback and broker.users is None and broker.allow_anonymous is None:
        log.log(
            30,
            "listening on %s (not loopback-only) without users: anonymous clients are refused"
            " (CONNACK 0x05 / 0x87). Set password_file, or allow_anonymous true, in the device config" % host,
        )


def _stop(log, why):
    """A start-up failure that every reset would repeat: say why and stay at
    the REPL so the file can be fixed (mpremote, docs/boards.md); exit 2 on
    the unix port."""
    log.log(40, why)
    if board.has_network():
        return 2
    sys.exit(2)


def run(argv=None, root=""):
    """Run the broker until interrupted; restart the board on a fatal error."""
    log = Log("info")
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
