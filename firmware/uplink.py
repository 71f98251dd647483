# The PPP uplink's shell: a modem (or any PPP peer) on a UART, dialled,
# watched and redialled while the broker serves (docs/boards.md, "PPP
# uplink"). Loaded only when the device config has "ppp".
#
# The policy is the core's (common/uplink/): the dial-up script
# (dialscript.py), when to dial, the negotiation's deadline, the back-off,
# the counts and the log lines (link.py). This task does the I/O: it opens
# the UART, writes the script's commands and feeds it what the modem
# answers (polled every POLL_MS: a dial is rare and short), hands the UART
# to MicroPython's network.PPP (lwIP's PPP: LCP, PAP/CHAP, IPCP; it reads
# the UART from the UART's RX-idle interrupt), waits for an address, then
# checks the link every WATCH_MS. A link that drops, or a dial that fails,
# is closed (the UART back to this task) and dialled again after the
# back-off. The listener (bound to 0.0.0.0) serves on the PPP interface as
# on any other; the bridge reconnects over it by its own back-off.

import asyncio
import os
import time

from common.uplink.dialscript import DONE, RUNNING, DialScript
from common.uplink.link import Uplink

POLL_MS = 20
WATCH_MS = 500


def open_uart(ppp):
    """The machine.UART of the "ppp" settings."""
    from machine import UART

    kw = {"baudrate": ppp["baudrate"], "timeout": 0}
    if ppp["tx"] is not None:
        kw["tx"] = ppp["tx"]
    if ppp["rx"] is not None:
        kw["rx"] = ppp["rx"]
    if ppp["flow"] == "rtscts":
        kw["flow"] = UART.RTS | UART.CTS
        if ppp["rts"] is not None:
            kw["rts"] = ppp["rts"]
            kw["cts"] = ppp["cts"]
    return UART(ppp["uart"], **kw)


async def dial(uart, steps, now):
    """Run the dial-up script; "" when it succeeded, else why not."""
    script = DialScript(steps)
    out = script.start(now())
    while script.state == RUNNING:
        if out:
            uart.write(out)
        n = uart.any()
        out = script.feed(uart.read(n), now()) if n else b""
        if not out and script.state == RUNNING:
            out = script.tick(now())
            if not out:
                await asyncio.sleep_ms(POLL_MS)
    return "" if script.state == DONE else script.reason


def _close(link):
    try:
        link.disconnect()
        link.__del__()  # the UART's interrupt released now, not at a collection
    except OSError:
        pass


async def run(server, ppp):
    """Dial, watch and redial for ever (cancelled at the stop)."""
    import network

    log = server.log
    now = time.ticks_ms
    uplink = Uplink(
        ppp["name"], ppp["backoff_min_ms"], ppp["backoff_max_ms"], ppp["connect_timeout_ms"], os.urandom, log.log
    )
    security = {"none": 0, "pap": network.PPP.SEC_PAP, "chap": network.PPP.SEC_CHAP}[ppp["security"]]
    uart = open_uart(ppp)
    log.log(
        20, "uplink %s: PPP on UART %d at %d baud (flow %s)" % (ppp["name"], ppp["uart"], ppp["baudrate"], ppp["flow"])
    )
    while True:
        wait = uplink.wait_ms(now())
        if wait:
            await asyncio.sleep_ms(wait)
        uplink.dialing(now())
        _publish(server, uplink)
        why = await dial(uart, ppp["dial"], now) if ppp["dial"] else ""
        if why:
            uplink.failed(now(), why)
            _publish(server, uplink)
            continue
        link = network.PPP(uart)
        link.connect(security=security, user=ppp["user"], key=ppp["password"])
        deadline = uplink.negotiating(now())
        while not link.isconnected() and time.ticks_diff(deadline, now()) > 0:
            await asyncio.sleep_ms(POLL_MS * 5)
        if not link.isconnected():
            _close(link)
            uplink.failed(
                now(), "PPP gave no address within %d ms (status %r)" % (ppp["connect_timeout_ms"], link.status())
            )
            _publish(server, uplink)
            continue
        uplink.up(now(), link.ifconfig()[0])
        _publish(server, uplink)
        while link.isconnected():
            await asyncio.sleep_ms(WATCH_MS)
        status = link.status()
        _close(link)
        uplink.lost(now(), "PPP down (status %r)" % (status,))
        _publish(server, uplink)


def _publish(server, uplink):
    """$SYS/broker/uplink/<name>/... as retained messages, where $SYS is on
    (limits.sys_interval > 0: each topic takes a retained slot)."""
    broker = server.driver.broker
    if broker.settings.sys_interval <= 0:
        return
    t = server.driver.now
    for topic, text in uplink.sys_values():
        broker.publish(topic, text.encode(), 0, True, t)
    server.flush()


def start_uplink(server, ppp):
    """The uplink's task."""
    return asyncio.create_task(run(server, ppp))
