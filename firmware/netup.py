# The last step of the start-up (firmware/app.py build(), unloaded after it):
# the watchdog, then the network. Run only once everything that can stop the
# start (config, store, memory, TLS room) has passed: on the RP2040 and the
# ESP32 a started machine.WDT cannot be stopped, so a stop at the REPL after
# it would become a reset loop.
#
# Wi-Fi: station mode with retry and exponential backoff (1, 2, 4 ... 32 s
# between attempts, `wifi_attempts` attempts of `wifi_timeout` s each); if no
# SSID is configured or every attempt failed, an access point named
# `ap_ssid` (open, or WPA2 with `ap_password`) for first-time provisioning:
# the broker serves on the AP's own network (192.168.4.1 on both ports) and
# docs/boards.md says how to put the Wi-Fi credentials on the board. An
# interface that does not come up (a radio that fails to start: "[CYW43]
# Failed to start CYW43") is reported as such and the whole bring-up tried
# again with a growing pause, the watchdog fed: the board never claims an
# address it does not have. Each attempt starts the radio once: the AP is
# configured before it is activated (config() on an active CYW43 interface
# takes it down and up again: two more starts), and an interface whose radio
# did not start is not talked to again (disconnect() and active(False) start
# the CYW43 once more). A start that fails blocks 0.35 s in the driver
# (measured in the emulated RP2040, make test-emu), where nothing feeds the
# watchdog. The port's `network` and `machine.WDT` are found by feature
# detection: the unix port (the tests) runs without either.
#
# PPP: with a "ppp" uplink in the device config the link is dialled by the
# server once it serves (firmware/uplink.py, redialled for ever), not here;
# Wi-Fi is then brought up only for a configured wifi_ssid (sensors on
# Wi-Fi, the uplink on the modem), never the provisioning access point. A
# board with `network` but no Wi-Fi (the plain Pico's image) and no "ppp"
# has nothing to serve on: that stops the start before the watchdog, at the
# REPL (firmware/app.py), not in a reset loop.

import time

from common.broker.limits import ConfigError
from firmware.board import has_network, machine_name

NO_ADDRESS = "0.0.0.0"
RETRY_MAX_MS = 60000


def bring_up(cfg, log):
    """Start the watchdog, then the network; the watchdog's feed (or None)."""
    loopback_only = cfg["host"].startswith("127.") and not cfg["bridge"]
    ppp = cfg["ppp"]
    if has_network() and not has_wifi() and ppp is None and not loopback_only:
        raise ConfigError(
            '%s has no Wi-Fi and no PPP uplink is configured: nothing to serve on. Add "ppp" to the device'
            ' config (a modem on a UART, docs/boards.md "PPP uplink"); the REPL is yours' % machine_name()
        )
    wdt = start_watchdog(cfg["watchdog_ms"], log)
    feed = wdt.feed if wdt is not None else None
    if not has_network():
        log.log(20, "no network module on this port: serving on the host's network")
        return feed
    if ppp is not None:
        log.log(20, "uplink %s: PPP over UART %d, dialled once the broker serves" % (ppp["name"], ppp["uart"]))
        if not cfg["wifi_ssid"] or not has_wifi():
            return feed
    if loopback_only:
        # Serving the board's own clients only, no uplink: nothing needs Wi-Fi.
        log.log(20, "Wi-Fi: not brought up (listening on loopback %s only, no bridge)" % cfg["host"])
        return feed
    delay = 1000
    while bring_up_network(cfg, log, feed) is None:
        log.log(40, "Wi-Fi: no interface is up, nothing to serve on; trying again in %d s" % (delay // 1000))
        _sleep_fed(delay, feed)
        delay = delay * 2 if delay < RETRY_MAX_MS // 2 else RETRY_MAX_MS
    return feed


def has_wifi():
    """The port's network module has Wi-Fi (network.WLAN)."""
    import network

    return hasattr(network, "WLAN")


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


def _address(wlan):
    """The interface's IPv4 address, or None while it is down or has none."""
    if not wlan.active():
        return None
    ip = wlan.ifconfig()[0]
    return None if ip == NO_ADDRESS else ip


def connect_station(cfg, log, feed=None):
    """Join the configured Wi-Fi; the IP address, or None after every attempt failed."""
    import network

    sta = network.WLAN(network.STA_IF)
    sta.active(True)
    if not sta.active():
        log.log(40, "Wi-Fi: the station interface did not start (the radio failed?)")
        return None
    try:
        network.hostname(cfg["hostname"])
    except (AttributeError, ValueError, OSError):
        pass
    delay = 1000
    joined = False  # a join was under way at least once (the radio started)
    for attempt in range(1, cfg["wifi_attempts"] + 1):
        log.log(20, "Wi-Fi: joining %r (attempt %d of %d)" % (cfg["wifi_ssid"], attempt, cfg["wifi_attempts"]))
        try:
            sta.connect(cfg["wifi_ssid"], cfg["wifi_password"])
            joining = True
        except OSError as e:
            # (The CYW43's EPERM: its radio did not start.) No join is under
            # way: nothing to wait for or to leave.
            log.log(30, "Wi-Fi: connect failed: %r" % (e,))
            joining = False
        waited = 0
        limit = cfg["wifi_timeout"] * 1000 if joining else 0
        while not sta.isconnected() and waited < limit:
            _sleep_fed(200, feed)
            waited += 200
        ip = _address(sta) if sta.isconnected() else None
        if ip is not None:
            log.log(20, "Wi-Fi: connected, address %s" % ip)
            return ip
        if joining:
            joined = True
            try:
                sta.disconnect()
            except OSError:
                pass
        if attempt < cfg["wifi_attempts"]:
            log.log(30, "Wi-Fi: not connected; retrying in %d s" % (delay // 1000))
            _sleep_fed(delay, feed)
            delay = delay * 2 if delay < 32000 else 32000
    if joined:
        sta.active(False)
    return None


def start_access_point(cfg, log):
    """The provisioning access point; its IP address, or None if it did not come up."""
    import network

    ap = network.WLAN(network.AP_IF)
    # Configured before it is activated. Not again on an interface left
    # active by an attempt whose radio did not start (the driver keeps the
    # settings): config() on it would restart the radio twice.
    if not ap.active() or _address(ap) is not None:
        if cfg["ap_password"]:
            # WPA2-PSK; the constant's name differs between ports (3 on both).
            security = getattr(network, "AUTH_WPA2_PSK", 3)
            ap.config(essid=cfg["ap_ssid"], password=cfg["ap_password"], security=security)
        else:
            ap.config(essid=cfg["ap_ssid"], security=0)
    ap.active(True)
    ip = _address(ap)
    if ip is None:
        # Left as it is: switching it off would start the radio again.
        log.log(
            40, "Wi-Fi: the access point %r did not come up (interface down or without an address)" % cfg["ap_ssid"]
        )
        return None
    log.log(30, "Wi-Fi: access point %r up, address %s (provisioning mode)" % (cfg["ap_ssid"], ip))
    return ip


def bring_up_network(cfg, log, feed=None):
    """Station mode, else the provisioning AP; the address, or None if no interface came up."""
    if cfg["wifi_ssid"]:
        ip = connect_station(cfg, log, feed)
        if ip is not None:
            return ip
        log.log(30, "Wi-Fi: %r unreachable after %d attempts" % (cfg["wifi_ssid"], cfg["wifi_attempts"]))
    else:
        log.log(30, "Wi-Fi: no wifi_ssid configured")
    return start_access_point(cfg, log)
