# The board side of a bridge (common/bridge/): the upstream stream and time,
# with MicroPython's asyncio. Imported only when the device config has a
# "bridge" list (a board without bridges pays nothing for them).
#
# Theory of operation: as cpython_host/bridge.py. The Link
# (common/bridge/link.py) joins the bridge's local client to the driver; per
# bridge one task connects to the upstream when the core says
# (Bridge.next_address: failover, back-off with jitter) and reads it, and one
# waits for the Link's wake-up or the next deadline, pumps the Link and writes
# the upstream output (Stream.write buffers; drain() sends).
#
# TLS (a bridge with tls / cafile / certfile): mbedTLS wraps the socket once
# its TCP connect completed (within connect_timeout), without handshaking
# (MicroPython has no awaitable do_handshake): the handshake then runs
# inside the non-blocking writes and reads of CONNECT and CONNACK, each step
# as far as the bytes at hand allow, so the event loop is never held for
# more than one step (the ECDHE arithmetic), and the core's connect timeout,
# which starts at up_open, ends a stalled handshake like a silent upstream.
# The certificate is verified against `cafile` (one DER CA: a board has no
# system CA store) with the address's host as the name to match (SNI too).
# A failure is logged by the core with its reason, kept in $SYS last_error,
# and retried with the back-off. The contexts are made at start-up
# (with_contexts, from firmware/app.py build: a bad file stops the board at
# the REPL, and the RAM check counts each TLS upstream). The TLS-only code
# is firmware/tls.py, loaded only when TLS is configured.

import asyncio
import gc
import os
import socket
import time
from errno import EINPROGRESS

from common.bridge.link import Link
from common.bridge.settings import make_bridge
from common.client.client import CONNECTED
from common.compat import TICKS_MASK, ticks_diff
from firmware import poller


def ticks():
    return time.ticks_ms() & TICKS_MASK


def with_contexts(bridges):
    """(BridgeSettings, ssl.SSLContext or None) pairs, at start-up; the TLS
    code (firmware/tls.py) is loaded only for a bridge that uses TLS."""
    out = []
    for b in bridges:
        ctx = None
        if b.tls or b.cafile or b.certfile:
            from firmware.tls import upstream_context

            ctx = upstream_context(b)
        out.append((b, ctx))
    return out


def _close(sock):
    if sock is not None:
        try:
            sock.close()
        except OSError:
            pass


def why_failed(e, tls, handshaking):
    """The reason of a failed connection, in words for the log and $SYS."""
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    if tls:
        from firmware.tls import upstream_failure

        return upstream_failure(e, handshaking)
    return "error %s" % e


class BridgeRunner:
    def __init__(self, server, settings, context):
        self.server = server
        self.settings = settings
        self.core = make_bridge(settings, server.log.log, os.urandom)
        self.woken = asyncio.Event()
        self.link = Link(self.core, server.driver, ticks, self.woken.set, server.flush)
        self.context = context  # ssl.SSLContext, None = plain TCP
        self.stream = None
        self.failure = None  # why a write failed (TLS: the handshake), for the reader to report
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
            if stream is not None and out and self.failure is None:
                try:
                    stream.write(out)  # TLS: also a step of the handshake, which may fail here
                    await stream.drain()
                except (OSError, ValueError) as e:
                    # The reader sees the end (within a second) and reports this.
                    if self.stream is stream:
                        self.failure = why_failed(e, self.context is not None, core.up.state != CONNECTED)
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
        ctx = self.context
        i = address.rfind(":")
        host = address[:i].strip("[]")
        raw = sock = None
        try:
            ai = socket.getaddrinfo(host, int(address[i + 1 :]), 0, socket.SOCK_STREAM)[0]
            raw = socket.socket(ai[0], ai[1], ai[2])
            raw.setblocking(False)
            try:
                raw.connect(ai[-1])
            except OSError as e:
                if e.errno != EINPROGRESS:
                    raise
            await asyncio.wait_for_ms(poller.writable(raw), int(self.settings.connect_timeout * 1000))
            # TLS: the handshake runs in the first writes and reads (theory above).
            sock = raw if ctx is None else ctx.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False)
        except (OSError, ValueError, MemoryError, asyncio.TimeoutError) as e:  # noqa: UP041 (asyncio's own class)
            _close(raw)
            core.up_failed(why_failed(e, False, False), ticks())
            self.woken.set()
            return
        stream = asyncio.StreamReader(sock)
        self.stream = stream
        self.failure = None
        core.up_open(ticks())
        self.woken.set()
        why = "closed by the upstream"
        handshaking = ctx is not None  # until the first byte through TLS
        try:
            while core.close_wanted is None and self.failure is None:
                # At most a second per read: a stream closed by the other
                # task does not wake a read waiting on it (MicroPython).
                try:
                    n = await asyncio.wait_for_ms(stream.readinto(self.buf), 1000)
                except asyncio.TimeoutError:  # noqa: UP041
                    continue
                if n is None:
                    continue  # (TLS: a partial record, nothing to hand on yet)
                if not n:
                    if handshaking:
                        from firmware.tls import ended_handshake

                        why = ended_handshake("closed")
                    break
                handshaking = False
                core.up.data_received(self.view[:n], ticks())  # (copied in)
                self.woken.set()
        except (OSError, ValueError) as e:
            why = why_failed(e, ctx is not None, handshaking)
        except MemoryError:
            # No room for what was read: this connection goes, the back-off
            # retries; not the end of the task (it would never connect again).
            gc.collect()
            why = "out of memory reading the upstream"
        self.stream = None
        _close(sock)
        _close(raw)  # (closing an SSLSocket may leave its socket open)
        if self.failure is not None:
            why = self.failure  # the writer's, first
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
            except (OSError, ValueError):
                pass
            _close(stream.s)
        for task in self.tasks:
            task.cancel()


def start_bridges(server, bridges):
    """`bridges`: (BridgeSettings, its upstream_context) pairs."""
    runners = []
    for b, ctx in bridges:
        r = BridgeRunner(server, b, ctx)
        r.start()
        runners.append(r)
        server.log.log(
            20,
            "bridge %s: to %s (%s, MQTT %s%s)"
            % (
                b.name,
                ", ".join(b.addresses),
                b.profile,
                "5" if b.protocol == 5 else "3.1.1",
                ", TLS" if ctx is not None else "",
            ),
        )
    return runners
