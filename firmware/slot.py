# A connection slot of the firmware's network shell (firmware/shell.py), and
# the driver's handle for the connection in it.
#
# Slots. The shell may hold `max_sockets` sockets, the listener included
# (the lwIP limit of the firmware, docs/boards.md). Each of the other
# max_sockets - 1 is a Slot made at start-up with its read buffer, so
# accepting a client allocates only its socket's entry in the poller. A Slot is also the driver's
# handle for its connection (write, half_close, close, abort, pending,
# pause_reading, resume_reading).
#
# Reading. A connection has no task: its socket sits in asyncio's own poller
# from the accept to the close (registered once, not at every wait as
# Stream.readinto does), and the slots' poller (firmware/poller.py, put in
# place of asyncio's I/O queue) notes which slots the poll found readable
# and has each of them read right after the poll, inside the event loop
# (Slot.read_ready: read what the socket has into the slot's preallocated
# buffer, hand it to driver.data_received(), flush).
# So a connection costs its socket and its entry in the poller, without a
# Task, a Stream, a coroutine frame, nor asyncio's per-wait entry (a list,
# the key id(sock), re-registered at every read; measured per client:
# docs/boards.md). While reading is paused or a drain writes the socket
# (asyncio's own entry for it then), the socket is out of the poller
# (Slot.listen).
#
# Writing, bounded. MicroPython's Stream.write buffers without bound, so a
# write goes straight to the socket (non-blocking). If the kernel (lwIP)
# does not take it all, the rest is handed to a drain task, the slot is
# "blocked" and the driver is told its buffer is full (set_paused: the core
# keeps that client's output and the slot stops reading it) until the drain
# completes. Only a closing connection's last output can arrive while
# blocked; it is written after the drain (`tail`), and so is the half-close.
#
# A slot ends in finish(): the socket closed once, a TLS handshake that never
# ended logged with its reason and counted, the slot freed, the driver told.

import asyncio

from firmware import poller


class Slot:
    """One connection slot: a preallocated read buffer; the driver's handle."""

    def __init__(self, index, bufsize):
        self.index = index
        self.peer = "?"  # TLS: the address, for a failed handshake's log line
        self.server = None
        self.buf = bytearray(bufsize)
        self.mv = memoryview(self.buf)
        self.reset()

    def reset(self):
        self.sock = None  # None: the slot is free
        self.cid = -1
        self.polled = False  # the socket is in the poller, for reading (listen)
        self.ready = False  # the poll found it readable: read next (Clients)
        self.drain_task = None
        self.blocked = False  # a write is draining
        self.tail = None  # a closing connection's last output, after the drain
        self.fin = False  # half-close after the drain
        self.paused = False  # reading stopped
        self.raw = None  # TLS: the TCP socket under `sock` (closing an SSLSocket does not close it)
        self.handshaking = False  # TLS: no byte came through the handshake yet
        self.error = None  # TLS: the error that ended the handshake

    # ------------------------------------------------ the driver's handle

    def write(self, data):
        # `data` is the core's output buffer, reused after the call: what
        # waits is copied (only when the socket is full).
        if self.blocked:
            self.tail = bytes(data) if self.tail is None else self.tail + data
            return
        try:
            n = self.sock.write(data)
        except OSError:
            self.abort()
            return
        if n is None:
            n = 0
        if n >= len(data):
            return
        # The socket's send buffer is full: the rest drains in a task.
        self.blocked = True
        self.listen()
        server = self.server
        server.driver.set_paused(self.cid, True)
        self.drain_task = asyncio.create_task(self.drain(self.sock, memoryview(bytes(data))[n:]))

    def half_close(self):
        self.resume_reading()  # a paused reader goes back to reading (and discarding)
        if self.blocked:
            self.fin = True
            return
        shutdown = getattr(self.sock, "shutdown", None)
        if shutdown is not None:  # the unix and lwIP ports of 1.29 have none
            try:
                shutdown(1)  # SHUT_WR: FIN after the output
            except OSError:
                pass

    def close(self):
        self.finish(self.sock)

    abort = close  # lwIP has no reset to send: both free the socket now

    def pending(self):
        return 1 if self.blocked else 0

    def pause_reading(self):
        self.paused = True
        self.listen()

    def resume_reading(self):
        self.paused = False
        self.listen()

    # ------------------------------------------------------------ reading

    def read_ready(self):
        """Read this slot, which the poll found readable (the slots' poller calls it)."""
        sock = self.sock
        try:
            self.read(sock)
        except Exception as e:  # a bug: contained to this connection
            self.server.log.log(40, "connection #%d: %r; closed" % (self.cid, e))
            self.finish(sock)

    def read(self, sock):
        """Read what `sock` has into the buffer and run it; False once the
        connection has ended (EOF, an error, or closed by what it sent)."""
        try:
            n = sock.readinto(self.mv)
        except OSError as e:
            self.error = e  # reset by the peer, or (TLS) a failed handshake
            n = 0
        if n is None:
            return True  # woken without data
        if not n:
            self.finish(sock)  # EOF
            return False
        self.handshaking = False
        server = self.server
        server.driver.data_received(self.cid, self.mv if n == len(self.buf) else self.mv[:n])
        server.flush()
        return self.sock is sock

    def listen(self):
        """Keep the socket in the poller while it is read: not while reading
        is paused, nor while a drain writes it (the drain's wait is
        asyncio's own entry for the socket, which one object cannot have
        twice in one poller)."""
        want = self.sock is not None and not self.paused and not self.blocked
        if want != self.polled:
            if want:
                poller.watch(self.sock)
            else:
                poller.unwatch(self.sock)
                self.ready = False
            self.polled = want

    # ------------------------------------------------------------ writing

    async def drain(self, sock, rest):
        """Write the rest of a write the socket did not take, then what waited."""
        server = self.server
        stream = asyncio.StreamWriter(sock, {})  # (only while a write drains: RAM)
        ok = True
        try:
            while rest is not None:
                stream.write(rest)
                await stream.drain()
                rest = self.tail
                self.tail = None
        except OSError:
            ok = False
        if self.sock is not sock:
            return  # finished meanwhile
        self.drain_task = None
        self.blocked = False
        if not ok:
            self.abort()
        elif self.fin:
            self.half_close()
        else:
            server.driver.set_paused(self.cid, False)
            self.listen()  # (set_paused does not resume a lingering one)
            server.flush()

    # ------------------------------------------------------------ closing

    def finish(self, sock):
        """Close `sock` and free this slot (once; a reused slot is left alone)."""
        server = self.server
        driver = server.driver
        if self.sock is not sock or sock is None:
            return
        cid = self.cid
        task = self.drain_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()  # off the I/O queue before the socket closes
        self.paused = True
        self.listen()  # (likewise)
        try:
            sock.close()
            if self.raw is not None:
                self.raw.close()
        except OSError:
            pass
        if self.handshaking and not server.stopping:
            # Closed before any byte came through TLS: by its error, or by
            # the core's connect timeout (a stalled handshake).
            from firmware.tls import handshake_failed  # (loaded at start-up with TLS: firmware/startup.py)

            handshake_failed(server, self)
        self.reset()
        server.free.append(self)
        driver.connection_lost(cid)
        server.log.log(10, "connection #%d closed" % cid)
        server.flush()  # a will may have been published


def peer_address(addr):
    """ "ip:port" of an accepted socket: a tuple on the ESP32 and the Pico W,
    a raw sockaddr on the unix port."""
    if addr is None:
        return "?"
    if isinstance(addr, tuple):
        return "%s:%d" % (addr[0], addr[1])
    import socket  # (as in start(): loaded once, by then)

    try:
        family, ip, port = socket.sockaddr(addr)
        return "%s:%d" % (socket.inet_ntop(family, ip), port)
    except (AttributeError, OSError, TypeError, ValueError):
        return "?"
