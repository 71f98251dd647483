# The firmware's start-up, run once by firmware/app.py build() and unloaded
# after it (firmware/startup_only.py: none of this code stays in a board's heap):
# config -> watchdog -> Wi-Fi -> store -> broker -> network shell, and the
# start-up log lines.
#
# Wi-Fi: station mode with retry and exponential backoff (1, 2, 4 ... 32 s
# between attempts, `wifi_attempts` attempts of `wifi_timeout` s each); if no
# SSID is configured or every attempt failed, an access point named
# `ap_ssid` (open, or WPA2 with `ap_password`) for first-time provisioning:
# the broker serves on the AP's own network (192.168.4.1 on both ports) and
# docs/boards.md says how to put the Wi-Fi credentials on the board. The
# port's `network` and `machine.WDT` are found by feature detection: the
# unix port (the tests) runs without either.

import os
import sys
import time

from common import VERSION
from common.broker.limits import ConfigError
from firmware.board import has_network
from firmware.shell import Log, Server, make_driver

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


def start(argv, root):
    """(server, log) ready to run, from the command line and config (app.build)."""
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
    wdt = start_watchdog(cfg["watchdog_ms"], log)
    feed = wdt.feed if wdt is not None else None
    bring_up_network(cfg, log, feed)
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
        # the heap before the TLS room is measured, app.build.)
        from firmware.bridge import with_contexts

        server.bridges = with_contexts(cfg["bridge"])
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


def start_watchdog(timeout_ms, log):
    """A started machine.WDT, or None where the port has none (or 0 = off)."""
    if not timeout_ms:
        return None
    try:
        from machine import WDT
    except ImportError:
        log.log(20, "no machine.WDT on this port: running without a watchdog")
        return None
    wdt = WDT(timeout=timeout_ms)
    log.log(20, "watchdog started (%d ms)" % timeout_ms)
    return wdt


def _sleep_fed(ms, feed):
    # Sleep in slices short enough to keep the watchdog fed.
    while ms > 0:
        step = 500 if ms > 500 else ms
        time.sleep_ms(step)
        ms -= step
        if feed is not None:
            feed()


def connect_station(cfg, log, feed=None):
    """Join the configured Wi-Fi; the IP address, or None after every attempt failed."""
    import network

    sta = network.WLAN(network.STA_IF)
    sta.active(True)
    try:
        network.hostname(cfg["hostname"])
    except (AttributeError, ValueError, OSError):
        pass
    delay = 1000
    for attempt in range(1, cfg["wifi_attempts"] + 1):
        log.log(20, "Wi-Fi: joining %r (attempt %d of %d)" % (cfg["wifi_ssid"], attempt, cfg["wifi_attempts"]))
        try:
            sta.connect(cfg["wifi_ssid"], cfg["wifi_password"])
        except OSError as e:
            log.log(30, "Wi-Fi: connect failed: %r" % (e,))
        waited = 0
        limit = cfg["wifi_timeout"] * 1000
        while not sta.isconnected() and waited < limit:
            _sleep_fed(200, feed)
            waited += 200
        if sta.isconnected():
            ip = sta.ifconfig()[0]
            log.log(20, "Wi-Fi: connected, address %s" % ip)
            return ip
        try:
            sta.disconnect()
        except OSError:
            pass
        if attempt < cfg["wifi_attempts"]:
            log.log(30, "Wi-Fi: not connected; retrying in %d s" % (delay // 1000))
            _sleep_fed(delay, feed)
            delay = delay * 2 if delay < 32000 else 32000
    sta.active(False)
    return None


def start_access_point(cfg, log):
    """The provisioning access point; its IP address."""
    import network

    ap = network.WLAN(network.AP_IF)
    ap.active(True)
    if cfg["ap_password"]:
        # WPA2-PSK; the constant's name differs between ports (3 on both).
        security = getattr(network, "AUTH_WPA2_PSK", 3)
        ap.config(essid=cfg["ap_ssid"], password=cfg["ap_password"], security=security)
    else:
        ap.config(essid=cfg["ap_ssid"], security=0)
    ip = ap.ifconfig()[0]
    log.log(30, "Wi-Fi: access point %r up, address %s (provisioning mode)" % (cfg["ap_ssid"], ip))
    return ip


def bring_up_network(cfg, log, feed=None):
    """Station mode, else the provisioning AP; None where the port has no `network`."""
    if not has_network():
        log.log(20, "no network module on this port: serving on the host's network")
        return None
    if cfg["wifi_ssid"]:
        ip = connect_station(cfg, log, feed)
        if ip is not None:
            return ip
        log.log(30, "Wi-Fi: %r unreachable after %d attempts" % (cfg["wifi_ssid"], cfg["wifi_attempts"]))
    else:
        log.log(30, "Wi-Fi: no wifi_ssid configured")
    return start_access_point(cfg, log)
