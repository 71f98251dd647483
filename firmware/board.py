# Everything that only a board has, behind small functions: Wi-Fi, the
# watchdog, reset. Each one detects what the running port offers (feature
# detection: `network` and `machine.WDT` are missing on the unix port), so
# the same main.py runs on a board and, with "no Wi-Fi, no WDT", on the unix
# port that the tests use.
#
# Wi-Fi: station mode with retry and exponential backoff (1, 2, 4 ... 32 s
# between attempts, `wifi_attempts` attempts of `wifi_timeout` s each); if no
# SSID is configured or every attempt failed, an access point named
# `ap_ssid` (open, or WPA2 with `ap_password`) for first-time provisioning:
# the broker serves on the AP's own network (192.168.4.1 on both ports) and
# docs/boards.md says how to put the Wi-Fi credentials on the board.

import time


def has_network():
    try:
        import network  # noqa: F401
    except ImportError:
        return False
    return True


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


def reset(log):
    """Restart the board (persisted state is on flash); exit 1 on the unix port."""
    try:
        import machine

        board_reset = machine.reset
    except (ImportError, AttributeError):
        board_reset = None
    if board_reset is None:
        import sys

        log.log(40, "no machine.reset on this port: exiting")
        sys.exit(1)
    time.sleep_ms(1000)  # let the log line leave the UART
    board_reset()


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


def tls_room(per_client, biggest, most):
    """(TLS clients whose mbedTLS buffers fit now, at most `most`; the heap's name).

    On the ESP32 MicroPython uses ESP-IDF's mbedTLS, which allocates from
    the IDF heap (the one the split MicroPython heap also grows into): the
    free bytes of its regions are divided. On the Pico W (and every port with
    MICROPY_MBEDTLS_CONFIG_BARE_METAL) mbedTLS allocates from the MicroPython
    heap (m_tracked_calloc), where what counts is whether its blocks (the
    largest `biggest` bytes: the 16 KB input buffer) find room among the
    pools: tried with real allocations, freed at once. The unix port's
    mbedTLS uses malloc; its capped MicroPython heap stands in for a Pico W's.
    """
    import gc

    gc.collect()
    try:
        import esp32

        room = 0
        for _total, free, largest, _low in esp32.idf_heap_info(esp32.HEAP_DATA):
            if largest >= biggest:  # a region without a block for the input buffer holds none
                room += free // per_client
        return min(room, most), "ESP-IDF heap"
    except (ImportError, AttributeError):
        pass
    blocks = []
    try:
        while len(blocks) < 2 * most:
            blocks.append(bytearray(biggest))
            blocks.append(bytearray(per_client - biggest))
    except MemoryError:
        pass
    room = len(blocks) // 2
    blocks = None
    gc.collect()
    return room, "MicroPython heap"
