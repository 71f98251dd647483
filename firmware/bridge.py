# The board side of a bridge (common/bridge/): the upstream stream and time,
# with MicroPython's asyncio. Imported only when the device config has a
# "bridge" list (a board without bridges pays nothing for them).
#
# Theory of operation: as cpython_host/bridge.py. The Link
# (common/bridge/link.py) joins the bridge's local client to the driver; per
# bridge one task connects to the upstream when the core says
# (Bridge.next_address: failover, back-off with jitter) and reads it, and one
# waits for the Link's wake-up or the next deadline, pumps the Link and writes
# the upstream output (Stream.write buffers; drain() sends). Plain TCP only:
# TLS to the upstream is not offered on the boards yet (refused at start).

import asyncio
import gc
import os
import time

from common.bridge.link import Link
from common.bridge.settings import make_bridge
from common.compat import TICKS_MASK, ticks_diff


def ticks():
    return time.ticks_ms() & TICKS_MASK


class BridgeRunner:
    def __init__(self, server, settings):
        self.server = server
        self.settings = settings
        self.core = make_bridge(settings, server.log.log, os.urandom)
        self.woken = asyncio.Event()
        self.link = Link(self.core, server.driver, ticks, self.woken.set, server.flush)
        self.stream = None
        self.tasks = []
        # One read buffer for the bridge's life: a fresh 1 KB per read can
        # find no contiguous block in a fragmented heap (MemoryError with
        # tens of KB free), and then no read ever succeeds again.
        self.buf = bytearray(1024)
        self.view = memoryview(self.buf)

    def start(self):
        self.tasks = [asyncio.create_task(self.pumping()), asyncio.create_task(self.connecting())]

    async def pumping(self):
        link = self.link
        core = self.core
        while True:
            due = link.next_deadline()
            out = link.pump()
            stream = self.stream
            if stream is not None:
                if out:
                    stream.write(out)
                    try:
                        await stream.drain()
                    except OSError:
                        pass  # the reader sees the end
                if core.close_wanted is not None:
                    stream.close()
            wait = 1000 if not due else min(max(0, ticks_diff(due, ticks())), 1000)
            self.woken.clear()
            try:
                await asyncio.wait_for_ms(self.woken.wait(), wait)
            except asyncio.TimeoutError:  # noqa: UP041 (MicroPython: asyncio's own class)
                pass

    async def connecting(self):
        core = self.core
        while True:
            address = core.next_address(ticks())
            if address is None:
                await asyncio.sleep_ms(50 if core.close_wanted is not None else 200)
                continue
            await self.session(address)

    async def session(self, address):
        core = self.core
        i = address.rfind(":")
        host = address[:i].strip("[]")
        try:
            stream, _ = await asyncio.wait_for_ms(
                asyncio.open_connection(host, int(address[i + 1 :])), int(self.settings.connect_timeout * 1000)
            )
        except (OSError, asyncio.TimeoutError) as e:  # noqa: UP041
            core.up_failed("timed out" if isinstance(e, asyncio.TimeoutError) else "error %s" % e, ticks())
            self.woken.set()
            return
        self.stream = stream
        core.up_open(ticks())
        self.woken.set()
        why = "closed by the upstream"
        try:
            while core.close_wanted is None:
                # At most a second per read: a stream closed by the other
                # task does not wake a read waiting on it (MicroPython).
                try:
                    n = await asyncio.wait_for_ms(stream.readinto(self.buf), 1000)
                except asyncio.TimeoutError:  # noqa: UP041
                    continue
                if not n:
                    break
                core.up.data_received(self.view[:n], ticks())  # (copied in)
                self.woken.set()
        except OSError as e:
            why = "error %s" % e
        except MemoryError:
            # No room for what was read: this connection goes, the back-off
            # retries; not the end of the task (it would never connect again).
            gc.collect()
            why = "out of memory reading the upstream"
        self.stream = None
        try:
            stream.close()
        except OSError:
            pass
        if core.close_wanted is not None:
            why = core.close_wanted
        core.up_failed(why, ticks())
        self.woken.set()

    def stop(self):
        """At shutdown: DISCONNECT upstream (best effort), the tasks cancelled."""
        self.link.stopping = True
        stream = self.stream
        if stream is not None:
            self.core.up.disconnect()
            out = self.core.up.take_output()
            try:
                if out:
                    stream.s.write(out)  # (the socket itself: no task left to drain)
                stream.close()
            except (OSError, AttributeError):
                pass
        for task in self.tasks:
            task.cancel()


def start_bridges(server, bridges):
    runners = []
    for b in bridges:
        if b.tls or b.cafile or b.certfile:
            raise ValueError("bridge %s: TLS to the upstream is not available on the boards yet" % b.name)
        r = BridgeRunner(server, b)
        r.start()
        runners.append(r)
        server.log.log(
            20,
            "bridge %s: to %s (%s, MQTT %s)"
            % (b.name, ", ".join(b.addresses), b.profile, "5" if b.protocol == 5 else "3.1.1"),
        )
    return runners
