# Retained replay as a cursor: what a SUBSCRIBE owes, sent as fast as the
# client reads it.
#
# Theory of operation. The retained messages matching a new or replaced
# subscription are sent with the retain flag set [MQTT-3.3.1-8], but not all
# at once: their topics are listed, in order, into a Replay the broker keeps
# for the connection (Broker.replays, its connection's id at the same index
# of Broker.replaying: a Connection itself costs not a byte more on a board),
# and PUBLISHes are made from it only while the connection's output is below
# max_out_buffer and its transport is not paused. The driver advances it again each time it
# flushes and finds that connection's output drained (Broker.run_replays),
# so a client that does not read costs at most max_out_buffer of output
# plus its list of topics, however many messages are retained.
#
# While a replay is pending, the connection's further input waits in its
# frame reader (Broker.data_received stops there) and the driver stops
# reading its socket: a burst of SUBSCRIBEs cannot stack replays, TCP pushes
# back on the client. Its input runs again when the replay ends.
#
# Each topic is looked up again when its turn comes and its *current*
# retained message is sent: a message retained on that topic meanwhile
# (which also reached the new subscription live) is never overtaken by the
# value it replaced, so the client ends with the newest; a cleared or
# expired one is skipped. The Replay holds topic strings and Subscriptions,
# never a pooled Message (pooled objects are reused), so ending it releases
# nothing but itself: the connection's end, a takeover or the removal of a
# subscription ends it.
#
# QoS 1/2 copies go through outbox.deliver() like routed ones: the
# inflight window, then the session's queue under its limits (queue_full).
#
# A replay that has not moved for replay_stall_timeout seconds (its client
# reads nothing) ends its connection: v5 DISCONNECT 0x97, 3.1.1 close.

from common.broker.outbox import deliver
from common.mqtt import consts as C


class Replay:
    """The retained messages a connection is still owed, by topic."""

    def __init__(self, conn, items, now):
        self.conn = conn
        # Each Subscription followed by the topics owed for it, in order;
        # entries are set to None once sent.
        self.items = items
        self.next = 0  # index of the next entry of `items`
        self.sub = None  # the Subscription of the topics being sent
        self.moved = now  # s: when it last sent something (the stall rule)


def start(broker, conn, subs, now):
    """After SUBACK: the retained messages owed to `subs`, as a Replay for `conn`.

    Sends what fits now; a replay left pending holds the connection's input.
    """
    retained = broker.routing.retained
    if not retained.count():
        return
    items = []
    found = []
    for sub in subs:
        retained.matching(sub.filter, found, now)
        if found:
            items.append(sub)
            for msg in found:
                items.append(msg.topic)
            del found[:]
    if not items:
        return
    replay = Replay(conn, items, now)
    broker.replays.append(replay)
    broker.replaying.append(conn.cid)
    broker.replay_changed = True
    advance(broker, replay, now)


def advance(broker, replay, now):
    """Send from `replay` while its connection's output is below max_out_buffer
    (at least one message into an empty output); end it when all is sent."""
    conn = replay.conn
    items = replay.items
    n = len(items)
    i = replay.next
    bound = broker.settings.max_out_buffer
    retained = broker.routing.retained
    session = conn.session
    sub = replay.sub
    ids = [sub.sub_id] if sub is not None and sub.sub_id else None
    while i < n and (conn.out_bytes < bound or not conn.out_bytes):
        item = items[i]
        items[i] = None
        i += 1
        if not isinstance(item, str):
            sub = item
            ids = [sub.sub_id] if sub.sub_id else None
            continue
        msg = retained.current(item, now)
        if msg is not None:
            qos = msg.qos if msg.qos < sub.qos else sub.qos
            deliver(broker, session, msg, qos | C.PUBLISH_RETAIN, ids, now)
    if i > replay.next:
        replay.moved = now
    replay.next = i
    replay.sub = sub
    if i >= n:
        end(broker, conn)


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
    i = len(replays) - 1
    while i >= 0:  # (backwards: a replay that ends leaves the list)
        replay = replays[i]
        if not replay.conn.paused:
            advance(broker, replay, now)
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
        if now - replay.moved < limit:
            continue
        broker.stats.closed_replay_stalled += 1
        owed = 0
        for item in replay.items:
            if isinstance(item, str):
                owed += 1
        conn = replay.conn
        text = "retained replay stalled: %d message(s) owed, output not drained for %d s (replay_stall_timeout %d)" % (
            owed,
            now - replay.moved,
            limit,
        )
        name = broker.client_name(conn)
        broker.log(30, "closing %s: %s; sent %s", (name, text, broker.fail(conn, C.RC_QUOTA_EXCEEDED, now, text=text)))
