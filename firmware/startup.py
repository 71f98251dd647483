# The firmware's start-up, run once by firmware/app.py build() and unloaded
# at its end (firmware/startup_only.py: none of this code stays in a board's heap):
# config -> store -> the core's start-up (common/startup.py: broker, driver,
# security, restore, removed bridges' sessions retired) -> network shell, and
# the start-up log lines (start); then build() unloads the start-up's code,
# checks the room for TLS and brings the network up (firmware/netup.py).
# Everything here may stop the start at the REPL (firmware/start_failed.py);
# the watchdog and the network come after it (firmware/netup.py), so a stop
# is never followed by a watchdog reset.

import gc
import os
import sys
import time

from common import VERSION
from common.broker.limits import ConfigError
from common.compat import unload
from firmware.shell import Log, Server, collect_often

DEFAULT_CONFIG = "/siskin.json"


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
    """(server, log) ready to run, from the command line and config
    (firmware/app.py build). What runs only to start (firmware/startup_only.py,
    this module among it: this function runs on without it) is unloaded
    after start(), so that its code does not stay in a board's heap
    (docs/boards.md)."""
    from firmware.startup_only import STARTUP_ONLY

    try:
        server, log, cfg = start(argv, root)
    finally:
        for name in STARTUP_ONLY:
            unload(name)
    # The room for TLS buffers is measured now, without the start-up's code:
    # the heap as it will serve (and as the blocks of mbedTLS will find it).
    upstreams = len([1 for _b, ctx in server.bridges if ctx is not None])
    if server.tls is not None or upstreams:
        from firmware.tls import check_tls_room  # (TLS only: RAM)

        slots = len(server.slots) if server.tls is not None else 0
        check_tls_room(server.driver.broker.settings.max_connections, slots, upstreams, log)
    # Nothing can stop the start from here on: the watchdog, then the network.
    from firmware.netup import bring_up

    try:
        server.on_tick = bring_up(cfg, log)
        server.uplink = cfg["ppp"]
    finally:
        unload("firmware.netup")
    return server, log


def start(argv, root):
    """(server, log, device config): the broker and its shell, not yet on the
    network, from the command line and config (app.build)."""
    from common import startup
    from common.store.store import StoreError
    from firmware.board import machine_name
    from firmware.boardcfg import (
        board_path,
        builtin_board,
        detect_board,
        load_board,
        load_device,
        load_security,
        load_tls,
    )
    from firmware.storage import index_keys, open_store

    args = parse_args(argv)
    # A freshly flashed board has no /siskin.json: the defaults, for the board
    # it runs on (an explicit --config must exist).
    fresh = args["config"] == DEFAULT_CONFIG and not _exists(DEFAULT_CONFIG)
    cfg = load_device(args["config"], missing_ok=fresh)
    if args["port"] is not None:
        cfg["port"] = args["port"]
    if args["board"] is not None:
        cfg["board"] = args["board"]
    if args["heap_report"] is not None:
        cfg["server"]["heap_report"] = args["heap_report"]
    log = Log(cfg["log_level"])
    if fresh:
        log.log(30, "no %s: the built-in defaults (docs/boards.md, Device config)" % DEFAULT_CONFIG)
    if cfg["board"] is None:
        cfg["board"] = detect_board(machine_name())
        log.log(20, "board settings for %s: %s (recognised)" % (machine_name(), cfg["board"]))
    path = board_path(args["root"] or root, cfg["board"])
    builtin = builtin_board(cfg["board"])
    settings, opts = load_board(path, cfg["limits"], cfg["server"], builtin)
    security = load_security(cfg)
    tls = load_tls(cfg, args["config"])
    log.log(20, "siskin %s on %s (board settings: %s)" % (VERSION, sys.platform, cfg["board"]))
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
                why + ': fix the path or the file system, set "storage": "none", or set'
                ' "storage_optional": true in the board\'s "server" settings to serve without persistence'
            )
        log.log(40, why + ": serving WITHOUT persistence (storage_optional)")
        store = None
    sn_port = None
    if cfg["mqttsn"] is not None:
        # Only then: a board without SN keeps it out of its heap. Loaded before
        # the broker's pools are made, so that its code (the MQTT client
        # included) lies low in the heap as the core's does, not in the holes
        # the pools leave (a source run compiles it there: no 4.6 KB block
        # was left in 250 KB free on the unix port at the Pico W's limits).
        from firmware.sn import sn_port

        if cfg["mqttsn"]["keys"]:
            import common.mqttsn.envelope  # noqa: F401  (the same for a keyed listener's code)
    driver = startup.assemble(
        settings,
        os.urandom,
        store,
        time.ticks_ms,
        (opts["close_linger"], opts["shutdown_timeout"]),
        gc.mem_alloc,
        (log.log, log.level),
    )
    driver.free_heap = gc.mem_free  # (the Sparkplug edge node's "Heap/Free Bytes")
    driver.set_security(*security)
    if cfg["jwt"] is not None:
        from firmware.board import wall
        from firmware.boardcfg import load_jwt

        driver.broker.jwt = load_jwt(cfg["jwt"], wall, args["config"])
    if store is not None:
        # The restore reads the store one record at a time and makes the
        # objects that stay between the garbage of each read: collected only
        # when the heap is full, they spread over all of it, and a board
        # restarted over a store at its limits found no block for the read
        # buffers after it. So collect as while serving, from here.
        collect_often(opts["gc_threshold"])
        # Wall time so that expiry counts the downtime (boards without NTP:
        # seconds since 2000 from boot, clamped by the store; see persistence.md).
        startup.restore(driver, int(time.time()), [b.name for b in cfg["bridge"]], log.log)
    server = Server(driver, opts, cfg["host"], cfg["port"], log, tls)
    if sn_port is not None:
        server.sn = sn_port(server, cfg["mqttsn"], time.ticks_ms)
    if cfg["bridge"]:
        # (Loaded here, not at the first connection: the bridge's code is in
        # the heap before the TLS room is measured, app.build.)
        from firmware.bridge import with_contexts

        server.bridges = with_contexts(cfg["bridge"])
    for level, text in startup.security_lines(
        driver.broker, ((cfg["host"], server.loopback),), "password_file, or allow_anonymous true, in the device config"
    ):
        log.log(level, text)
    return server, log, cfg


def _exists(path):
    try:
        os.stat(path)
    except OSError:
        return False
    return True
