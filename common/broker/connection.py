# One network connection as the core sees it: protocol level, the peer's
# limits, the frame reader and the output waiting for the shell.
#
# Lifecycle: FREE -> NEW (accepted, CONNECT not yet seen) -> CONNECTED ->
# CLOSING (the broker decided to close: the shell flushes the output, then
# half-closes and reports connection_lost) -> FREE. A connection the shell
# reports lost goes straight to FREE.

from common.compat import const

FREE = const(0)
NEW = const(1)
CONNECTED = const(2)
CLOSING = const(3)

# Connection.deadline of a connection closed by its timer (Output.is_silent).
SILENT = -1

# Connections accepted beyond max_connections only to send a polite refusal
# (Broker.connection_made).
REFUSAL_SLOTS = 4


class Connection:
    # Slots on CPython: no per-object dict (about 80 B less per connection on
    # the host). MicroPython ignores them: an object's attributes are a hash
    # table that grows in steps (12, 17, 23, 29 entries, 8 B each on a
    # 32-bit board), so what few connections have waits in `extras`, and
    # these 17 take the 17-entry table.
    __slots__ = (
        "acl",
        "cid",
        "deadline",
        "dirty",
        "extras",
        "keep_alive",
        "level",
        "more",
        "out",
        "out_bytes",
        "paused",
        "peer",
        "reader",
        "receive_maximum",
        "session",
        "state",
        "user",
    )

    def __init__(self, cid):
        self.cid = cid  # the id the shell knows this connection by
        self.reader = None
        self.reset()

    def reset(self):
        self.state = FREE
        self.level = 4  # wire format used for output: 4 (3.1 and 3.1.1) or 5
        self.session = None
        # Encoded packets waiting for the shell, back to back: a bytearray
        # that Output.take swaps for a spare (no new object per
        # flush), up to Output.chunk bytes; beyond, a backlog (a slow
        # reader) goes to `more`, a list of separate copies, so that no
        # connection's output needs one large block of a board's heap.
        self.out = bytearray()
        self.more = None
        self.out_bytes = 0  # in `out` and `more`
        self.dirty = False
        self.paused = False  # the transport is above its high-water mark
        self.keep_alive = 0
        # CONNECT timeout or keep-alive deadline in wrapping ms ticks
        # (compat.ticks_diff), 0 = none; a computed 0 is stored as 1.
        self.deadline = 0
        self.peer = None  # (address, TLS identity, loopback listener[, listener key]) from the shell
        self.user = None  # the logged-in user (login.py), None: anonymous
        self.acl = None  # its rules (acl.ClientAcl), None: no ACL configured
        self.receive_maximum = 65535  # the peer's (v5 CONNECT property)
        self.extras = None  # an Extras once the connection has any

    def extra(self):
        """Its Extras, made at the first use."""
        extras = self.extras
        if extras is None:
            extras = self.extras = Extras()
        return extras

    def connect_pending(self):
        """Whether a CONNECT waits for its enhanced authentication to end."""
        extras = self.extras
        return extras is not None and extras.pending is not None


def mount_of(conn):
    """Its listener's mount point (a topic prefix), None: none."""
    extras = conn.extras
    return None if extras is None else extras.mount


class Extras:
    """What few connections have (Connection.extras): a v5 client's limits
    other than Receive Maximum and its topic aliases, its enhanced
    authentication, a refusal. Made at the first of them (Connection.extra).

    The class attributes are the defaults: an object holds only what was
    set on it (never reset: a reused Connection gets a new one), so on
    MicroPython its attribute table has that many entries, none at first.
    """

    refuse_reason = 0  # accepted only to refuse its CONNECT politely
    # A cap on its inflight window other than max_inflight, 0 none: a
    # bridge's local connection (common/bridge/link.py), whose window is
    # the bridge's `window` setting, so that max_inflight (a device's cap)
    # does not bound what the bridge keeps in flight upstream. (Here, not
    # on Connection: an 18th attribute there costs every client 48 B.)
    window_cap = 0
    # The peer's own limits (v5 CONNECT properties).
    max_packet_out = 0  # 0 = no limit
    alias_max_out = 0
    problem_info = True  # v5 Request Problem Information
    aliases_in = None  # inbound topic alias -> topic (a dict of its own once set)
    aliases_out = None  # topic -> outbound alias (likewise)
    # v5 enhanced authentication (handle_connect), in progress or done: the
    # method object (auth_scram.ScramSha256), None = none used; the
    # method's state between AUTH packets; the CONNECT waiting for the
    # exchange to end.
    method = None
    state = None
    pending = None
    # Its listener's mount_point (a topic prefix, listener_policy.py), None:
    # none. (Here, not on Connection: an 18th attribute there costs every
    # client 48 B; few listeners have one.)
    mount = None



class Connections:
    """The broker's connections, by the id the shell knows each one by.

    A closed connection's object and id are reused for the next accepted
    one (the shell's ids stay small); `dirty` lists, in order, the ids with
    output to take or a close to perform: its first `ndirty` slots. It never
    shrinks (removing from a list reallocates it on MicroPython), so that
    naming them once warm allocates nothing (next_dirty).
    """

    def __init__(self):
        self.by_id = []  # index = connection id
        self.free_ids = []
        self.live = 0
        self.dirty = []
        self.ndirty = 0
        self.next = 0  # next_dirty's place in its round; 0 = between rounds
        self.taken = 0  # dirty[:taken] are the round's (marked before it began)

    def open(self):
        """A FREE Connection for a newly accepted socket."""
        if self.free_ids:
            conn = self.by_id[self.free_ids.pop()]
        else:
            conn = Connection(len(self.by_id))
            self.by_id.append(conn)
        self.live += 1
        return conn

    def release(self, conn):
        """The socket is gone: the connection and its id are free again."""
        conn.reset()
        conn.reader = None
        self.live -= 1
        self.free_ids.append(conn.cid)

    def mark_dirty(self, conn):
        if not conn.dirty:
            conn.dirty = True
            n = self.ndirty
            dirty = self.dirty
            if n < len(dirty):
                dirty[n] = conn.cid
            else:
                dirty.append(conn.cid)
            self.ndirty = n + 1

    def next_dirty(self):
        """The next dirty id, its flag cleared, or -1 at the end of a round.

        A round names, in order, the ids dirty when it began (their flags
        are cleared then); those marked meanwhile wait for the next round.
        """
        dirty = self.dirty
        i = self.next
        if not i:
            taken = self.ndirty
            if not taken:
                return -1
            self.taken = taken
            by_id = self.by_id
            for k in range(taken):
                by_id[dirty[k]].dirty = False
        if i < self.taken:
            self.next = i + 1
            return dirty[i]
        # The round is over: those marked during it move to the front.
        taken = self.taken
        n = self.ndirty
        for k in range(taken, n):
            dirty[k - taken] = dirty[k]
        self.ndirty = n - taken
        self.next = 0
        self.taken = 0
        return -1
