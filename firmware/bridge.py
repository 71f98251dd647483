# The board's runtime for the bridges (common/bridge/runner.py runs them),
# with MicroPython's asyncio. Imported only when the device config has a
# "bridge" list (a board without bridges pays nothing for them).
#
# Theory of operation: what the Runner asks of a shell (its module doc):
# the clock, a connection whose events go to the runner, a sleep a wake-up
# cuts short, the driver's flush. A connection is one task that connects
# (non-blocking, within the runner's connect timeout, which closes it) and
# reads; writes go through the stream's buffer (Stream.write sends what
# the socket takes at once) and a small task drains what it did not.
#
# TLS (a bridge with tls / cafile / certfile): mbedTLS wraps the socket once
# its TCP connect completed, without handshaking (MicroPython has no
# awaitable do_handshake): the handshake then runs inside the non-blocking
# writes and reads of CONNECT and CONNACK, each step as far as the bytes at
# hand allow, so the event loop is never held for more than one step (the
# ECDHE arithmetic), and the core's connect timeout, which starts at
# up_open, ends a stalled handshake like a silent upstream. The
# certificate is verified against `cafile` (one DER CA: a board has no
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

from common.bridge.runner import Runner
from common.compat import TICKS_MASK, ticks_diff
from firmware import poller
from firmware.board import wall as board_wall


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


class Upstream:
    """One connection to the upstream (the runner's `conn`)."""

    def __init__(self, rt, runner):
        self.rt = rt
        self.runner = runner
        self.raw = None  # the socket
        self.sock = None  # the socket, or its TLS wrapper
        self.stream = None
        self.closed = False
        self.handshaking = rt.context is not None  # until the first byte through TLS
        self.draining = False
        self.drainer = None  # the task draining what the socket did not take at once
        self.task = None  # the task of run()

    async def run(self, address):
        """Connect, then read until the stream ends or close()."""
        try:
            why = await self._session(address)
        except Exception as e:  # anything else: this connection ends, the runner hears why
            why = "error %r" % (e,)
        self._shut()
        if not self.closed and why is not None:
            self.closed = True
            self.runner.up_ended(self, why)

    async def _session(self, address):
        rt = self.rt
        ctx = rt.context
        i = address.rfind(":")
        host = address[:i].strip("[]")
        try:
            ai = socket.getaddrinfo(host, int(address[i + 1 :]), 0, socket.SOCK_STREAM)[0]
            raw = self.raw = socket.socket(ai[0], ai[1], ai[2])
            raw.setblocking(False)
            try:
                raw.connect(ai[-1])
            except OSError as e:
                if e.errno != EINPROGRESS:
                    raise
            await asyncio.wait_for_ms(poller.writable(raw), rt.timeout_ms)
            if self.closed:
                return None
            # TLS: the handshake runs in the first writes and reads (theory above).
            self.sock = raw if ctx is None else ctx.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False)
        except (OSError, ValueError, MemoryError, asyncio.TimeoutError) as e:  # noqa: UP041 (asyncio's own class)
            return why_failed(e, False, False)
        self.stream = asyncio.StreamReader(self.sock)
        self.runner.up_opened(self)
        return await self._read_all()

    async def _read_all(self):
        rt = self.rt
        stream = self.stream
        tls = rt.context is not None
        try:
            while not self.closed:
                # At most a second per read: a stream closed by the other
                # task does not wake a read waiting on it (MicroPython).
                try:
                    n = await asyncio.wait_for_ms(stream.readinto(rt.buf), 1000)
                except asyncio.TimeoutError:  # noqa: UP041 (MicroPython: asyncio's own class)
                    continue
                if n is None:
                    continue  # (TLS: a partial record, nothing to hand on yet)
                if not n:
                    if self.handshaking:
                        from firmware.tls import ended_handshake

                        return ended_handshake("closed")
                    return "closed by the upstream"
                self.handshaking = False
                self.runner.up_received(self, rt.view[:n])  # (copied in)
        except (OSError, ValueError) as e:
            return why_failed(e, tls, self.handshaking)
        except MemoryError:
            # No room for what was read: this connection goes, the back-off
            # retries; the task lives on.
            gc.collect()
            return "out of memory reading the upstream"
        return "closed"

    def write(self, data):
        stream = self.stream
        if stream is None or self.closed:
            return "the connection is closed"
        try:
            stream.write(data)  # sends what the socket takes now (TLS: a step of the handshake)
        except (OSError, ValueError) as e:
            return why_failed(e, self.rt.context is not None, self.handshaking)
        if stream.out_buf and not self.draining:
            self.draining = True
            self.drainer = asyncio.create_task(self._drain())
        return None

    async def _drain(self):
        try:
            await self.stream.drain()
        except (OSError, ValueError) as e:
            if not self.closed:
                self.closed = True
                self._shut()
                self.runner.up_ended(self, why_failed(e, self.rt.context is not None, self.handshaking))
        finally:
            self.draining = False

    def close(self):
        self.closed = True
        stream = self.stream
        if stream is not None and stream.out_buf:
            try:
                self.sock.write(stream.out_buf)  # (best effort: a DISCONNECT at the end)
            except (OSError, ValueError):
                pass
        self._shut()

    def _shut(self):
        _close(self.sock)
        _close(self.raw)  # (closing an SSLSocket may leave its socket open)


class BoardRuntime:
    """What common/bridge/runner.py asks of the shell, on MicroPython's asyncio."""

    def __init__(self, server, settings, context):
        self.server = server
        self.context = context  # ssl.SSLContext, None = plain TCP
        self.timeout_ms = int(settings.connect_timeout * 1000)
        self.woken = asyncio.Event()
        self.flush = server.flush
        # One read buffer for the bridge's life: a fresh 1 KB per read can
        # find no contiguous block in a fragmented heap (MemoryError with
        # tens of KB free), and then no read ever succeeds again.
        self.buf = bytearray(1024)
        self.view = memoryview(self.buf)

    def now(self):
        return ticks()

    def wall(self):
        return board_wall()

    def wake(self):
        self.woken.set()

    async def sleep_until(self, due):
        woken = self.woken
        if woken.is_set():  # woken while it stepped: step again (after the others' turn)
            woken.clear()
            await asyncio.sleep_ms(0)
            return
        wait = 1000 if not due else min(max(0, ticks_diff(due, ticks())), 1000)
        try:
            await asyncio.wait_for_ms(woken.wait(), wait)
        except asyncio.TimeoutError:  # noqa: UP041
            pass
        woken.clear()

    def open(self, address, runner):
        conn = Upstream(self, runner)
        conn.task = asyncio.create_task(conn.run(address))
        return conn


def start_bridges(server, bridges):
    """`bridges`: (BridgeSettings, its upstream_context) pairs; the Runners, their tasks started."""
    runners = []
    for b, ctx in bridges:
        r = Runner(b, server.driver, BoardRuntime(server, b, ctx), server.log.log, os.urandom)
        r.task = asyncio.create_task(r.run())
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
