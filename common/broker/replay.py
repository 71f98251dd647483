# Retained replay as a cursor: what a SUBSCRIBE owes, sent as fast as the
# client reads it.
#
# Theory of operation. The retained messages matching a new or replaced
# subscription are sent with the retain flag set [MQTT-3.3.1-8], but not all
# at once: the broker keeps a Replay for the connection (Broker.replays, its
# connection's id at the same index of Broker.replaying: a Connection itself
# costs not a byte more on a board) holding the subscriptions owed and a
# cursor over the retained store for the one being replayed
# (topics.FilterCursor: the stack of tree nodes it is inside of, their child
# names sorted). PUBLISHes are made from it only while the connection's
# output is below max_out_buffer and its transport is not paused; the first
# goes out before the walk has looked at the others. The driver advances it
# again each time it flushes and finds that connection's output drained
# (Broker.run_replays), so a client that does not read costs at most
# max_out_buffer of output plus its cursor, however many messages are
# retained.
#
# The first message leaves at once: the SUBSCRIBE's turn makes at most
# _FIRST_BYTES of the replay (the driver writes them at the end of that turn)
# and the next flush's run() leaves that replay alone (its first part not
# yet written); the flushes after it make up to max_out_buffer each.
#
# While a replay is pending, the connection's further input waits in its
# frame reader (Broker.data_received stops there) and the driver stops
# reading its socket: a burst of SUBSCRIBEs cannot stack replays, TCP pushes
# back on the client. Its input runs again when the replay ends.
#
# Order: subscription by subscription as in the SUBSCRIBE, each one's
# topics in the retained store's order (topics.py, TopicTree). Each topic's
# message is read from the tree when the cursor reaches it, so what is sent
# is its *current* retained message: a message retained on that topic
# meanwhile (which also reached the new subscription live) is never
# overtaken by the value it replaced, so the client ends with the newest; a
# cleared or expired one is skipped. A topic first retained meanwhile
# below a node the cursor has not entered yet is replayed too (after its
# live copy, with RETAIN 1); one elsewhere is not (a node's child names are
# sorted when the cursor enters it): it reached the client live. The Replay
# holds Subscriptions and tree nodes, never a pooled Message (pooled
# objects are reused; a node leaves the tree empty), so ending it releases
# nothing but itself: the connection's end, a takeover or the removal of a
# subscription ends it.
#
# QoS 1/2 copies go through outbox.deliver() like routed ones: the
# inflight window, then the session's queue under its limits (queue_full).
#
# A replay that has not moved for replay_stall_timeout seconds (its client
# reads nothing) ends its connection: v5 DISCONNECT 0x97, 3.1.1 close.

from common.broker.outbox import deliver
from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_PUBLISH_RETAIN = const(0x04)

_FIRST_BYTES = const(4096)  # at most this much of a replay in the SUBSCRIBE's turn


class Replay:
    """The retained messages a connection is still owed."""

    def __init__(self, conn, subs, cursor, now):
        self.conn = conn
        self.subs = subs  # the Subscriptions owed, in the SUBSCRIBE's order
        self.index = 0  # of the one being replayed
        self.cursor = cursor  # over the retained messages it matches; None: all sent
        self.sent = 0  # messages sent (the stall rule's log)
        self.moved = now  # s: when it last sent something (the stall rule)
        self.fresh = True  # its first part not written yet: run() leaves it once


def start(broker, conn, subs, now):
    """After SUBACK: the retained messages owed to `subs`, as a Replay for `conn`.

    Sends what fits now; a replay left pending holds the connection's input.
    """
    retained = broker.routing.retained
    if not retained.count():
        return
    replay = Replay(conn, subs, retained.cursor(subs[0].filter), now)
    bound = broker.settings.max_out_buffer
    advance(broker, replay, now, _FIRST_BYTES if _FIRST_BYTES < bound else bound)
    if replay.cursor is not None:
        broker.replays.append(replay)
        broker.replaying.append(conn.cid)
        broker.replay_changed = True


def advance(broker, replay, now, bound):
    """Send from `replay` while its connection's output is below `bound`
    (at least one message into an empty output); end it when all is sent."""
    conn = replay.conn
    retained = broker.routing.retained
    session = conn.session
    cursor = replay.cursor
    sub = replay.subs[replay.index]
    ids = [sub.sub_id] if sub.sub_id else None
    moved = False
    while conn.out_bytes < bound or not conn.out_bytes:
        msg = cursor.next()
        if msg is None:  # this subscription's are all sent: the next one's
            replay.index += 1
            if replay.index >= len(replay.subs):
                replay.cursor = None
                end(broker, conn)
                return
            sub = replay.subs[replay.index]
            ids = [sub.sub_id] if sub.sub_id else None
            cursor = replay.cursor = retained.cursor(sub.filter)
            continue
        moved = True
        if not msg.expiry or retained.live(msg, now):  # (most never expire: no call)
            qos = msg.qos if msg.qos < sub.qos else sub.qos
            deliver(broker, session, msg, qos | _PUBLISH_RETAIN, ids, now)
            replay.sent += 1
    if moved:
        replay.moved = now


def end(broker, conn):
    """Forget `conn`'s replay, if any (done, or its connection or subscription is gone)."""
    replaying = broker.replaying
    if replaying and conn.cid in replaying:
        i = replaying.index(conn.cid)
        del replaying[i]
        del broker.replays[i]
        broker.replay_changed = True


def run(broker, now):
    """Advance every replay whose connection's output has drained."""
    replays = broker.replays
    bound = broker.settings.max_out_buffer
    i = len(replays) - 1
    while i >= 0:  # (backwards: a replay that ends leaves the list)
        replay = replays[i]
        if replay.fresh:
            replay.fresh = False
        elif not replay.conn.paused:
            advance(broker, replay, now, bound)
        i -= 1


def waiting(broker):
    """True if a replay can go on now (its output is not paused)."""
    for replay in broker.replays:
        if not replay.conn.paused:
            return True
    return False


def close_stalled(broker, now):
    """End the connections whose replay has not moved for replay_stall_timeout s."""
    limit = broker.settings.replay_stall_timeout
    if not limit:
        return
    replays = broker.replays
    i = len(replays) - 1
    while i >= 0:
        replay = replays[i]
        i -= 1
        if now - replay.moved >= limit:
            from common.broker.refusal import replay_stalled  # (rare: refusal.py)

            replay_stalled(broker, replay, now, limit)
