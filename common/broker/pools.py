# Bounded pools and rings.
#
# Theory of operation: every long-lived object the broker holds for a peer
# (sessions, subscriptions, message slabs) comes from a SlotPool
# with a fixed capacity decided at start-up from the board settings. A pool
# recycles its objects through a free list and answers None when it is full,
# so the caller can give the protocol's polite refusal instead of growing.
# With prealloc (boards) every object is created at start-up so the heap is
# laid out once; without it (host) objects are created on first use, up to
# the same capacity, and recycled.
#
# A Ring is a bounded FIFO over a list; it grows by doubling up to its cap so
# an idle session costs no slot (a ring made with initial 0 has none until its
# first push), never more than the cap.

from common.compat import const


class SlotPool:
    """Fixed-capacity pool of reusable objects made by `factory()`."""

    def __init__(self, factory, capacity, prealloc=False):
        self.factory = factory
        self.capacity = capacity
        self.created = 0
        self.in_use = 0
        self.free = []
        if prealloc:
            for _ in range(capacity):
                self.free.append(factory())
            self.created = capacity

    def alloc(self):
        """An object from the pool, or None when all `capacity` are in use."""
        if self.free:
            obj = self.free.pop()
        elif self.created < self.capacity:
            obj = self.factory()
            self.created += 1
        else:
            return None
        self.in_use += 1
        return obj

    def release(self, obj):
        obj.reset()
        self.in_use -= 1
        self.free.append(obj)


class Message:
    """One application message, stored once and shared by every queue.

    `refs` counts the deliveries, the retained store and a session's will
    holding it; at zero it goes back to the pool. Ten attributes: on
    MicroPython one more costs 16 bytes per message (the attribute map grows
    in steps), so the size is computed, not kept.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        self.topic = ""
        self.payload = b""
        self.qos = 0
        self.retain = False
        # The v5 properties it forwards, None = none: the list as decoded
        # (wire order) until the first v5 delivery replaces it with their
        # encoded items (a bytearray: properties.encode_property_items), which
        # every later delivery copies next to its own properties. Encoded
        # lazily: a message routed only to 3.1.1 clients never pays for it.
        self.props = None
        self.expiry = 0  # absolute time (s) after which it is dropped, 0 = never
        self.refs = 0
        # Encoded once per message, fan-out copies bytes, not work: its
        # first 3.1.1 and v5 copies (later copies at the same QoS are
        # patched in the client's output: egress._write_shared);
        # dropped after routing if the message is kept.
        self.wire4 = None
        self.wire5 = None
        self.store_id = 0  # id of its record in the store, 0 = not stored

    def size(self):
        """Topic + payload length, for the queue and retained byte limits."""
        return len(self.topic) + len(self.payload)


class MessagePool:
    """Message slabs with reference counting.

    `listener` hears of a stored message's last drop (message_freed).
    """

    def __init__(self, capacity, prealloc, listener):
        self.pool = SlotPool(Message, capacity, prealloc)
        self.listener = listener
        self.payload_bytes = 0  # of the messages held ($SYS store/messages/bytes)

    def new(self, topic, payload, qos, retain, props, expiry):
        msg = self.pool.alloc()
        if msg is None:
            return None
        msg.topic = topic
        msg.payload = payload
        self.payload_bytes += len(payload)
        msg.qos = qos
        msg.retain = retain
        msg.props = props
        msg.expiry = expiry
        return msg

    def hold(self, msg):
        msg.refs += 1

    def drop(self, msg):
        msg.refs -= 1
        if msg.refs <= 0:
            if msg.store_id:
                self.listener.message_freed(msg)
            self.release(msg)

    def release(self, msg):
        """Back to the pool: nothing refers to it."""
        self.payload_bytes -= len(msg.payload)
        self.pool.release(msg)

    def in_use(self):
        return self.pool.in_use


# The first slots of a ring made empty (initial 0).
_RING_FIRST = const(4)


class Ring:
    """Bounded FIFO. push() answers False when the ring is at its cap."""

    __slots__ = ("buf", "cap", "count", "head")

    def __init__(self, cap, initial=_RING_FIRST):
        self.cap = cap
        size = initial if initial < cap else cap
        self.buf = [None] * size if size > 0 else ()
        self.head = 0
        self.count = 0

    def push(self, item):
        buf = self.buf
        n = len(buf)
        if self.count == n:
            if n >= self.cap:
                return False
            self._grow()
            buf = self.buf
            n = len(buf)
        buf[(self.head + self.count) % n] = item
        self.count += 1
        return True

    def peek(self):
        return self.buf[self.head] if self.count else None

    def pop(self):
        if not self.count:
            return None
        buf = self.buf
        item = buf[self.head]
        buf[self.head] = None
        self.head = (self.head + 1) % len(buf)
        self.count -= 1
        return item

    def clear(self):
        """Empty the ring and return its items in order (to release them)."""
        out = []
        while self.count:
            out.append(self.pop())
        return out

    def items(self):
        """The items in order, as a new list (for persistence and tests)."""
        buf = self.buf
        n = len(buf)
        out = []
        for i in range(self.count):
            out.append(buf[(self.head + i) % n])
        return out

    def _grow(self):
        old = self.items()
        size = len(self.buf) * 2 or _RING_FIRST
        if size > self.cap:
            size = self.cap
        self.buf = old + [None] * (size - len(old))
        self.head = 0
