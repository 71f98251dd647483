# The MicroPython network shell: a socket adapter for the core's driver.
#
# Theory of operation
# -------------------
# Every decision lives in the core: the Broker (common/broker/broker.py) makes the
# MQTT ones, the Driver (common/driver.py) those of the connection's life
# (flush, half-close, linger, abort, containment of a core bug, shutdown,
# timers, batch sync, $SYS). This module moves bytes and time, within a
# microcontroller's means:
#
# Start: firmware/starting.py (listen, the tasks, the MQTT-SN port, the
# bridges, the uplink, the "listening on" line), run once when serving
# begins and unloaded; the stop: firmware/stopping.py, loaded when it begins.
#
# Slots: firmware/slot.py (a preallocated read buffer per connection, the
# driver's handle; reading without a task, bounded writing).
#
# Listener. A connection beyond the free slots, or one the core refuses
# (connection_made -> -1), is accepted and closed at once: the socket goes
# back to lwIP instead of sitting in the backlog. The core itself keeps a
# few connections beyond max_connections to answer their CONNECT with
# CONNACK 0x03 / 0x89 (Broker.connection_made, REFUSAL_SLOTS); the board
# files size max_connections below the slots so one slot at least is left
# for that polite answer.
#
# Retained replay. driver.flush() answers True while a client is still owed
# retained messages and its socket takes them: flush() then keeps flushing,
# once per turn of the loop, in a task of its own (common/broker/replay.py).
#
# TLS. With a certificate in the device config (boardcfg.load_tls) every
# accepted socket is wrapped by mbedTLS before its reader starts; the
# handshake then runs inside the reads (MicroPython has no awaitable
# do_handshake), so the connection is the driver's from its accept and the
# core's connect timeout, which starts there, closes a stalled handshake
# like a silent client: no slot is held longer than connect_timeout. The
# first bytes the client sends through TLS end the handshake as far as the
# shell can tell (MicroPython's ssl says nothing else: no getpeercert, and
# cipher() before the handshake's end reads a NULL); a slot closed before
# them is a failed handshake: logged with the reason and counted
# (driver.tls_failed, $SYS clients/tls_failed). The words of those failures
# are firmware/tls.py's, loaded at start-up only with TLS.
#
# Timer. One task sleeps until the deadline driver.tick() returns; once a
# second it also runs the callback the firmware hangs on it (the watchdog
# feed) and collects garbage, so the heap is laid out again every second
# rather than when it is exhausted.
#
# Internals of MicroPython's asyncio: none here. What the shell needs of
# them (the slots' poller, an awaitable accept) is firmware/poller.py's,
# which refuses to start on an asyncio that lacks them.

import asyncio
import gc

from common.broker.clienttext import printable
from common.broker.settings import LOG_LEVELS
from common.compat import unload
from firmware import poller
from firmware.slot import Slot, peer_address


class Log:
    """Lines on stdout: `LEVEL siskin: text` (the board's REPL or the unix log)."""

    def __init__(self, level="info"):
        self.level = LOG_LEVELS.get(level, 20)

    def log(self, level, text):
        if level >= self.level:
            name = "DEBUG" if level < 20 else "INFO" if level < 30 else "WARNING" if level < 40 else "ERROR"
            # The sink: no control character of any line reaches the
            # terminal raw (the core's lines are escaped already: clienttext).
            print("%s siskin: %s" % (name, printable(text, False)))


class Server:
    def __init__(self, driver, opts, host, port, log, tls=None):
        self.driver = driver
        self.tls = tls  # the listener's ssl.SSLContext, None = plain MQTT
        self.opts = opts
        self.host = host
        # Whether the listener serves this board only (the anonymous rule, login.py).
        self.loopback = host == "localhost" or host == "::1" or host.startswith("127.")
        self.port = port
        self.log = log
        self.slots = []
        for i in range(opts["max_sockets"] - 1):
            slot = Slot(i, opts["read_buffer"])
            slot.server = self
            self.slots.append(slot)
        self.free = list(self.slots)
        self.refused = 0
        self.lsock = None
        self.accept_task = None
        self.clock_task = None
        driver.wake = self.wake_clock
        self.stopping = False
        self.stop_event = asyncio.Event()
        self.on_tick = None  # callable() run every second (watchdog feed)
        self.replay_task = None  # flushes while a retained replay goes on
        self.heap_next = 0
        self.bridges = []  # (BridgeSettings, SSLContext or None) pairs; firmware/bridge.py runs them
        self.bridge_runners = []
        self.uplink = None  # the device config's "ppp" settings; firmware/uplink.py runs the link
        self.uplink_task = None
        self.sn = None  # firmware/sn.py SnPort: the device config's "mqttsn", else None

    # ---------------------------------------------------------- lifecycle

    def start(self):
        """Collect as while serving, listen and start the tasks
        (firmware/starting.py: run once, then unloaded); the bound port."""
        collect_often(self.opts["gc_threshold"])
        from firmware.starting import start  # (once: a serving board keeps none of it)

        try:
            return start(self)
        finally:
            unload("firmware.starting")

    async def serve(self):
        """Run until stop() is requested; then shut down gracefully."""
        self.start()
        await self.stop_event.wait()
        await self.stop("stop requested")

    def request_stop(self):
        self.stop_event.set()

    async def stop(self, reason):
        if self.stopping:
            return
        self.stopping = True
        from firmware.stopping import stop  # (once, at the end: a serving board keeps none of it)

        await stop(self, reason)

    # ------------------------------------------------------------ accept

    async def accept_loop(self):
        lsock = self.lsock
        while True:
            await poller.readable(lsock)
            try:
                sock, addr = lsock.accept()
            except OSError:
                continue  # the peer gave up before we got to it
            self._accepted(sock, addr)

    def _accepted(self, sock, addr):
        slot = self.free.pop() if self.free and not self.stopping else None
        peer = (peer_address(addr), None, self.loopback)
        cid = self.driver.connection_made(slot, peer) if slot is not None else -1
        if cid < 0:
            # Beyond every slot (or the core's refusal slots): close at once,
            # so the socket goes back to lwIP.
            if slot is not None:
                self.free.append(slot)
            self.refused += 1
            sock.close()
            self.log.log(30, "refused a connection: %d sockets in use" % (self.driver.open + 1))
            return
        sock.setblocking(False)
        if self.tls is not None:
            from firmware.tls import wrap_accepted  # (loaded at start-up with TLS: firmware/startup.py)

            sock = wrap_accepted(self, slot, sock, cid, peer)
            if sock is None:
                return
        slot.sock = sock
        slot.cid = cid
        slot.listen()
        self.log.log(10, "connection #%d opened (slot %d)" % (cid, slot.index))

    # ------------------------------------------------------------ flushing

    def flush(self):
        """Write what the core has; while a retained replay can go on
        (driver.flush() -> True), flush again on the next turns of the loop."""
        if self.driver.flush() and self.replay_task is None:
            self.replay_task = asyncio.create_task(self._replay())

    async def _replay(self):
        # One flush per turn of the loop: the other connections run in between.
        try:
            while True:
                await asyncio.sleep_ms(0)
                if not self.driver.flush():
                    break
        finally:
            self.replay_task = None

    # -------------------------------------------------------------- timer

    async def timer_loop(self):
        driver = self.driver
        report = self.opts["heap_report"]
        if report:
            from firmware.heap_report import report_heap  # (heap_report > 0 only)
        second = 0
        while True:
            delay = driver.tick()
            if self.sn is not None:
                delay = self.sn.tick(delay)  # the gateway's deadline joins the driver's
            t = driver.now
            if t != second:
                second = t
                if self.on_tick is not None:
                    self.on_tick()
                before = gc.mem_alloc() if report else 0
                gc.collect()
                if report and t >= self.heap_next:
                    self.heap_next = t + report
                    report_heap(self, t, before - gc.mem_alloc())
            await asyncio.sleep_ms(delay)  # (cut short by wake_clock)

    def wake_clock(self):
        """Driver.wake: a deadline came in before the clock's sleep ends (a
        client held back for its rates is released within ms): cut the
        sleep short (firmware/poller.py: not by cancelling it, which
        MicroPython refuses while it names the clock task current)."""
        task = self.clock_task
        if task is not None and not self.stopping:
            poller.wake(task)


def collect_often(threshold):
    """Collect now and then every `threshold` bytes allocated (0: only when
    the heap is full). Collected only when the heap is full, the long-lived
    objects made meanwhile (while serving; at start-up, the restore's
    sessions, subscriptions and retained messages) spread over all of it
    between the garbage, and no block is left for the largest packet or a
    read buffer. Collected every `threshold` bytes, they fill the holes low
    in the heap and the top stays in one piece (docs/boards.md)."""
    if threshold:
        gc.collect()
        gc.threshold(threshold)
