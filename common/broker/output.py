# The broker's output: what each connection is sent, and when it may leave.
#
# Theory of operation. Handlers write encoded packets to a connection
# (write); the driver names the connections with output or a close waiting
# (next_dirty), takes each one's bytes (take) and closes those that are
# closing (is_closing). Rule 1: this is the only module that changes a
# connection's output buffers (`out`, `more`, `out_bytes`) and its dirty
# mark. Rule 2: the "an ack waits for the store's sync" gate lives here
# whole; the driver and common/turns.py ask it (waiting, unsynced) and never
# look at the store.
#
# The sync gate (store_sync = always, with a store): output that
# acknowledges something (PUBACK, PUBREC, PUBCOMP, CONNACK, SUBACK...: all
# but a QoS 0/1 PUBLISH to a subscriber, written `early`) and a close leave
# only when the store holds no change not yet synced. `sync_from[cid]` is
# where in a connection's output (a byte count) what waits begins, -1 =
# nothing waits; everything written after it waits too (its order kept). A
# round of next_dirty() syncs the store as it begins, unless `early` (the
# driver's round before the sync: what may leave before it); take() then
# hands over only what precedes the first packet that waits, and names the
# connection again for the rest ("Deliveries before the sync" in
# docs/persistence.md).

from common.broker.connection import CLOSING, SILENT

# Output.chunk at least (bytes).
OUT_CHUNK_MIN = 512


class Output:
    def __init__(self, connections, stats, listener, settings):
        s = settings
        self.connections = connections
        self.stats = stats
        self.listener = listener
        # The spare output buffer take() swaps in: none is allocated per flush.
        self.spare = bytearray()
        # The most a connection's output buffer holds before a backlog goes
        # to separate objects (Connection.more): a quarter of max_out_buffer.
        self.chunk = s.max_out_buffer // 4 if s.max_out_buffer >= OUT_CHUNK_MIN * 4 else OUT_CHUNK_MIN
        # cid -> where the output that waits for the store's sync begins, -1
        # = none; None: nothing ever waits (no store, or store_sync = batch).
        self.sync_from = [] if listener.durable and s.store_sync == "always" else None
        self.waiting = 0  # how many of them are not -1: the driver's second round
        # store_sync = batch: the ms between the driver's timed syncs (0 = none).
        self.batch_ms = s.store_sync_ms if listener.durable and s.store_sync == "batch" else 0

    # ------------------------------------------------ a connection's life

    def opened(self, cid):
        """A connection got id `cid` (Broker.connection_made)."""
        sync_from = self.sync_from
        if sync_from is not None:
            while len(sync_from) <= cid:
                sync_from.append(-1)  # (lost() sets a freed id's back to -1)

    def closing(self, conn):
        """`conn` starts closing: its close waits for the sync as an ack does
        (the session's end is kept before the close)."""
        if self.sync_from is not None:
            self._wait_for_sync(conn)
        self.connections.mark_dirty(conn)

    def lost(self, cid):
        """The socket of `cid` is gone: its output is dropped with it."""
        sync_from = self.sync_from
        if sync_from is not None and sync_from[cid] >= 0:
            sync_from[cid] = -1
            self.waiting -= 1

    # ------------------------------------------------------------- write

    def write(self, conn, data, early=False):
        """Append `data` to the connection's output; the buffer it landed in
        (it ends with `data`: a caller may patch its copy there)."""
        # `early`: a QoS 0/1 PUBLISH to a subscriber, which may leave before
        # the store's sync. Anything else written with store_sync = always
        # (an ack, a CONNACK, a QoS 2 PUBLISH...) waits for it, and so does
        # everything written after it to that connection (its order kept).
        n = len(data)
        if not early and self.sync_from is not None:
            self._wait_for_sync(conn)
        conn.out_bytes += n
        buf = conn.out
        if conn.more is None and len(buf) + n <= self.chunk:
            buf.extend(data)
        else:
            buf = bytearray(data)  # (a copy: `data` may be a caller's buffer)
            if conn.more is None:
                conn.more = [buf]
            else:
                conn.more.append(buf)
        if not conn.dirty:  # (the common case, without a call, on the hot path)
            self.connections.mark_dirty(conn)
        return buf

    def _wait_for_sync(self, conn):
        # What is written to `conn` from here on (or its close) waits for
        # the store's sync (store_sync = always): take().
        sync_from = self.sync_from
        if sync_from[conn.cid] < 0:
            sync_from[conn.cid] = conn.out_bytes
            self.waiting += 1

    # ------------------------------------------------ the driver's face

    def dirty(self):
        """How many connections have output to take or a close to perform."""
        return self.connections.ndirty

    def next_dirty(self, early=False):
        """The next id of a connection with output to take or a close to
        perform; -1 at the end of the round (the next call starts another).
        A round names the connections dirty when it began, in order, and
        syncs the store as it begins unless `early` (the sync gate above)."""
        conns = self.connections
        if not conns.next and conns.ndirty and not early:
            self.sync_pending()
        return conns.next_dirty()

    def unsynced(self):
        """Whether acks wait for changes the store has not synced yet."""
        return self.sync_from is not None and self.listener.pending()

    def sync(self):
        """Make every stored change durable now (store_sync = batch: the driver's timer)."""
        self.listener.sync()

    def sync_pending(self):
        """Sync the store if acks may wait for it and it has changes not yet
        synced (a round's start, and the driver's tick: what no ack waited for)."""
        if self.sync_from is not None and self.listener.pending():
            self.listener.sync()

    def take(self, cid):
        """The bytes waiting for connection `cid` (None if none or paused):
        a bytearray of the broker's, valid until the next take (it is the
        spare that call swaps in); bytes after a backlog."""
        # While the store has changes not yet synced, only the output before
        # the first packet that waits for the sync is taken; the connection
        # is named again in the next round for the rest.
        conn = self.connections.by_id[cid]
        if conn.paused and conn.state != CLOSING:
            return None
        sync_from = self.sync_from
        if sync_from is not None:
            at = sync_from[cid]
            if at >= 0:
                if self.listener.pending():
                    return self._take_before_sync(conn, at)
                sync_from[cid] = -1
                self.waiting -= 1
        if not conn.out_bytes:
            return None
        return self._take_all(conn)

    def _take_all(self, conn):
        self.stats.bytes_sent += conn.out_bytes
        conn.out_bytes = 0
        out = conn.out
        more = conn.more
        if more is not None:
            # A backlog: joined (a slow reader's, not the per-message path).
            conn.more = None
            more.insert(0, out)
            data = b"".join(more)
            out[:] = b""
            return data
        spare = self.spare
        spare[:] = b""
        conn.out = spare
        self.spare = out
        return out

    def _take_before_sync(self, conn, at):
        # Of the output, the first `at` bytes (QoS 0/1 PUBLISHes) go now;
        # the rest waits for the sync, kept in order as the connection's
        # output (held from its start), and the connection stays dirty.
        self.connections.mark_dirty(conn)
        if not at:
            return None
        n = conn.out_bytes
        data = self._take_all(conn)
        self.stats.bytes_sent -= n - at
        self.sync_from[conn.cid] = 0  # (write() leaves it there)
        self.write(conn, data[at:])  # (a copy: a client that publishes and receives)
        if isinstance(data, bytes):
            return data[:at]  # (a backlog joined)
        data[at:] = b""
        return data

    def is_closing(self, cid):
        """Closing, and nothing waits for the store's sync (take)."""
        if self.connections.by_id[cid].state != CLOSING:
            return False
        return self.sync_from is None or self.sync_from[cid] < 0

    def is_silent(self, cid):
        """Closed because the peer fell silent (keep-alive, connect timeout).

        Such a connection has no input to drain before the close, so the
        shell need not linger (where it cannot half-close, a linger would
        keep the peer waiting for nothing).
        """
        return self.connections.by_id[cid].deadline == SILENT

    def set_paused(self, cid, paused):
        """The shell's buffer for `cid` went above high / below low water:
        its output stays here meanwhile."""
        conn = self.connections.by_id[cid]
        conn.paused = paused
        if not paused and conn.out_bytes:
            self.connections.mark_dirty(conn)
