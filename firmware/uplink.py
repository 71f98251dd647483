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
# back-off.
#
# A link is taken for lost as soon as its address is gone: when the peer
# ends LCP, lwIP takes the interface down at once but reports the end
# (network.PPP's isconnected() False) only after its LCP timer, and
# MicroPython's rp2 port runs lwIP's timers only while a netif link is up
# or a TCP connection is open, so that report may never come (seen in the
# emulator: the board still "connected" 1,900 s after the peer's Terminate-
# Request). The link is closed the same way: network.PPP's finaliser
# would close it as for a lost carrier, but lwIP ignores that while LCP is
# terminating; so while a link negotiates or ends, this task kicks lwIP's
# timers (a blocking UDP receive of KICK_S polls lwIP, which starts them
# for a tick) until it has ended, then closes it: lwIP has one PPP control
# block, and the next dial needs it free.
#
# The listener (bound to 0.0.0.0) serves on the PPP interface as on any
# other; the bridge reconnects over it by its own back-off. An error of an
# attempt (an OSError of the UART or of network.PPP) counts as a failed
# dial: the task never dies.

import asyncio
import os
import time

from common.uplink.dialscript import DONE, RUNNING, DialScript
from common.uplink.link import Uplink

POLL_MS = 20
WATCH_MS = 500
NO_ADDRESS = "0.0.0.0"
KICK_S = 0.01  # s a kick of lwIP's timers blocks the loop
CLOSE_MS = 20000  # ms a link's LCP may take to end before it is closed as for a lost carrier


def open_uart(ppp):
    """The machine.UART of the "ppp" settings."""
    from machine import UART

    # timeout: network.PPP writes each frame with the UART's write, which
    # gives up with what it wrote when its TX ring (256 B) has no room for
    # `timeout` ms (timeout_char once a byte went in). 0 ended such a write
    # at the next tick of the ms clock: frames were cut (lwIP: ERR_IF) in a
    # burst. One character's time, rounded up, and the tick: the ring then
    # always gets room in time unless the modem holds CTS. The cost: a
    # network.PPP poll ends with a read that waits as long for more input.
    kw = {"baudrate": ppp["baudrate"], "timeout": 10000 // ppp["baudrate"] + 2}
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


def _kick():
    """Run lwIP's timers once (see above): a blocking socket call polls lwIP,
    which starts them for a tick."""
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(KICK_S)
        s.recv(1)
    except OSError:
        pass
    finally:
        s.close()


def _ended(link):
    # network.PPP's status(): 0 inactive, 1 active, < 0 an error (ended);
    # 3 connecting, 4 connected.
    return link.status() <= 1


async def _close(link):
    """End the link and free lwIP's PPP for the next dial: LCP's terminate
    runs on lwIP's timers (FSM_DEFTIMEOUT, 6 s), kicked meanwhile; then the
    finaliser closes it as for a lost carrier."""
    waited = 0
    while not _ended(link) and waited < CLOSE_MS:
        _kick()
        await asyncio.sleep_ms(WATCH_MS)
        waited += WATCH_MS
    try:
        link.__del__()  # (not disconnect(): it waits for the same timer)
    except OSError:
        pass
    # The object's finaliser runs again when the heap is collected, and would
    # switch the UART's interrupt off under the next link (seen in the
    # emulator: after a redial the board's input stopped at the first
    # collection): the stream is not its own any more.
    link.config(stream=None)


def _up(link):
    return link.isconnected() and link.ifconfig()[0] != NO_ADDRESS


async def _attempt(uart, ppp, uplink, security, server):
    """One dial: the script, PPP, the watch until the link is lost."""
    import network

    now = time.ticks_ms
    why = await dial(uart, ppp["dial"], now) if ppp["dial"] else ""
    if why:
        uplink.failed(now(), why)
        return
    link = network.PPP(uart)
    try:
        link.connect(security=security, user=ppp["user"], key=ppp["password"])
        deadline = uplink.negotiating(now())
        while not _up(link) and time.ticks_diff(deadline, now()) > 0:
            _kick()  # (LCP and IPCP retransmit on lwIP's timers)
            await asyncio.sleep_ms(WATCH_MS)
        if not _up(link):
            status = link.status()
            await _close(link)
            uplink.failed(now(), "PPP gave no address within %d ms (status %r)" % (ppp["connect_timeout_ms"], status))
            return
        uplink.up(now(), link.ifconfig()[0])
        _publish(server, uplink)
        while _up(link):
            await asyncio.sleep_ms(WATCH_MS)
        why = "its address is gone (LCP ended)" if link.isconnected() else "PPP down (status %r)" % (link.status(),)
        await _close(link)
        uplink.lost(now(), why)
    except OSError as e:
        await _close(link)
        raise e


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
        try:
            await _attempt(uart, ppp, uplink, security, server)
        except OSError as e:
            # (lwIP out of PPP control blocks, a UART error): counted and
            # logged as a failed dial, and dialled again: the task never dies.
            uplink.failed(now(), "error %r" % (e,))
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
