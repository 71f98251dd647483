# One delivery of one message to one session, from routing to the last ack.
#
# Theory of operation. Routing turns a message into one Delivery per
# receiving session. The same record waits in the session's queue (QUEUED),
# moves to its inflight window when the PUBLISH goes out (SENT, with its
# packet id), becomes RELEASED when a QoS 2 PUBREC arrives (the message ref
# is dropped, PUBREL awaits PUBCOMP) and goes back to the DeliveryPool's
# free list when it is acknowledged, expires, is dropped or handed over.
# The persistence listener names its store record by `seq` (0 = not stored).
#
# Memory: MicroPython keeps instance attributes in a hash map that grows in
# steps (3 or 4 attributes cost the same, 5 or 6 cost 16 bytes more on a
# 32-bit port), so a Delivery has four: qos, retain, state, the shared flag
# and the packet id are packed into one small int (`bits`, below 2**22), and
# the subscription identifiers and the shared group share one slot (`tag`).
#
#   msg   the pooled Message (holding one ref), None once RELEASED
#   bits  the PUBLISH's QoS, retain flag and packet id as the encoders read
#         them (consts.PUBLISH_*), with the state in bits 3-4 and SHARED:
#         the state SENT is the PUBLISH_DUP bit, so the bits of a delivery
#         already sent are those of its resend [MQTT-3.3.1-1]
#   tag   without SHARED: the v5 Subscription Identifiers (list) or None;
#         with SHARED: the picked member's Subscription.share, a tuple
#         (SharedGroup, identifiers or None) made once per subscription
#   seq   the store's sequence number of its record, 0 = not stored

# Only common/broker/outbox.py reads and writes a Delivery besides this
# module (egress.py reads the PUBLISH bits it is handed).

from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_PUBLISH_PID_SHIFT = const(6)
_PUBLISH_QOS_MASK = const(0x03)
_PUBLISH_RETAIN = const(0x04)

# `bits` layout beyond the PUBLISH's (QoS 0-1, retain 2, packet id from 6)
_STATE_SHIFT = const(3)
_STATE_MASK = const(3 << _STATE_SHIFT)
SHARED = const(32)

# Delivery states (the values are the store's record states, docs/persistence.md)
QUEUED = const(0)  # routed, not sent
SENT = const(1)  # PUBLISH sent with its packet id, awaiting PUBACK (QoS 1) or PUBREC (QoS 2)
RELEASED = const(2)  # PUBREL sent, awaiting PUBCOMP; the message is gone


class Delivery:
    def __init__(self):
        self.msg = None
        self.bits = 0
        self.tag = None
        self.seq = 0

    def qos(self):
        return self.bits & _PUBLISH_QOS_MASK

    def retain(self):
        return self.bits & _PUBLISH_RETAIN != 0

    def state(self):
        return (self.bits & _STATE_MASK) >> _STATE_SHIFT

    def packet_id(self):
        return self.bits >> _PUBLISH_PID_SHIFT

    def shared_group(self):
        """The SharedGroup this delivery was picked for, or None."""
        return self.tag[0] if self.bits & SHARED else None

    def sub_ids(self):
        """The v5 Subscription Identifiers to send with it, or None."""
        return self.tag[1] if self.bits & SHARED else self.tag

    def set_sent(self, packet_id):
        self.bits = (
            (self.bits & ~(_STATE_MASK | (0xFFFF << _PUBLISH_PID_SHIFT))) | (SENT << _STATE_SHIFT) | (packet_id << _PUBLISH_PID_SHIFT)
        )

    def set_released(self):
        self.bits = (self.bits & ~_STATE_MASK) | (RELEASED << _STATE_SHIFT)


class DeliveryPool:
    """Delivery records recycled through a free list.

    A delivery holds one reference to its message (in `messages`, the
    MessagePool) from new() until release() or until a PUBREC lets it go.

    Not capped itself: every delivery sits in a bounded queue or inflight
    window, so their number is bounded by those. Up to `keep` released
    records wait for reuse, so steady routing allocates none, while a
    burst's records beyond that go back to the heap. The free list is
    linked through the records' `tag` (a Python list would shrink and grow
    its storage as records come and go: an allocation per message on
    MicroPython).
    """

    def __init__(self, messages, keep):
        self.messages = messages
        self.keep = keep
        self.spare = 0
        self.head = None
        self.in_use = 0  # handed out by new(), not yet released (the fuzz tests' leak check)

    def new(self, msg, bits, tag):
        d = self.head
        if d is None:
            d = Delivery()
        else:
            self.head = d.tag
            self.spare -= 1
        self.in_use += 1
        if msg is not None:  # (None: a RELEASED delivery being restored)
            self.messages.hold(msg)
        d.msg = msg
        d.bits = bits  # QoS | _PUBLISH_RETAIN | SHARED
        d.tag = tag
        d.seq = 0
        return d

    def release(self, d):
        """The delivery is over: drop its message reference, recycle the record."""
        if d.msg is not None:
            self.messages.drop(d.msg)
            d.msg = None
        self.in_use -= 1
        if self.spare < self.keep:
            d.tag = self.head
            self.head = d
            self.spare += 1
        else:
            d.tag = None
