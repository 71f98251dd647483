# Fairness between connections: which input the driver handles in a turn
# of the shell's event loop, and which waits for the next one.
#
# Theory of operation
# -------------------
# A shell whose loop turn can read many sockets at once (the host: asyncio
# hands over the reads of up to a thousand sockets in one turn) passes every
# read through input() instead of Driver.data_received, and calls
# end_turn() at the end of a loop turn when `due` says so. The rules:
#
# - At most `per_turn` inputs are handled as they are read; input beyond
#   that waits for end_turn(), which handles up to `per_turn` of what
#   waits. A storm of connections (2,000 clients connecting, or leaving, at
#   once) then costs each turn at most two allowances, and a client that
#   was not part of the storm is answered within a turn or two
#   (tests/host/test_server_churn.py, tools/churn.py).
# - A new connection's first input (its CONNECT) waits whenever any input
#   waits: a storm's CONNECTs (session, CONNACK, log line) queue behind the
#   clients already served. With nothing waiting it goes at once, like any
#   input within the allowance: a client reconnecting alone does not pay a
#   loop turn.
# - Two queues: input from a connection whose previous input was handled
#   at once goes before input from one that waited last time too (a new
#   connection, a storm's member, a client sending more than its share), so
#   a bystander put off once is not queued behind the whole storm.
# - A connection's input is handled in the order it came; while input of
#   its own waits, more input is kept after it and its socket is not read
#   (Driver.hold, HELD_INPUT).
# - One store sync per turn: input handled at once is flushed at once
#   (input() answers True), unless it changed a store that syncs before
#   acks leave (store_sync = always): then only what may leave before the
#   sync goes at once (QoS 0/1 deliveries: Driver.flush(False)), and the
#   rest, and the sync, wait for end_turn(), which the turn's inputs share.
#
# The firmware reads at most max_sockets sockets per poll (a handful) and
# needs none of this: it calls Driver.data_received itself, and this
# module's code stays out of a board's heap.

from common.compat import const
from common.driver import HELD_INPUT

# Inputs handled as they are read, and from the queues, per loop turn:
# 64 CONNECTs cost a few ms; fewer would cost a storm more loop turns (a
# poll each), more would let it hold others back longer.
INPUT_PER_TURN = const(64)

# Per connection (Turns.flags)
_ADMITTED = const(1)  # its first input was handled (at once or from a queue)
_WAITED = const(2)  # its last input was put off (a new connection counts as such)
_PAUSED = const(4)  # not read while its input waits (more came meanwhile)
_EOF = const(8)  # its peer's EOF came after input still waiting: close after it


class Turns:
    def __init__(self, driver, per_turn=INPUT_PER_TURN):
        self.driver = driver
        self.per_turn = per_turn
        self.spent = 0  # inputs handled at once in this turn
        self.due = False  # end_turn() must run at the end of this loop turn
        self.flags = {}  # cid -> _ADMITTED | _WAITED | _PAUSED | _EOF
        self.waiting = {}  # cid -> the input put off (bytes, in order)
        # The connections with input put off, in order: those whose last
        # input went at once, then those that waited last time too.
        self.first = []
        self.again = []
        self.output = driver.output  # whether acks wait for the store's sync

    def idle(self):
        """No input waits: a new connection's first input may go at once."""
        return not self.first and not self.again

    def input(self, cid, data):
        """Bytes read from connection `cid`: handled now, or put off to a
        later turn. True: flush now (Driver.flush); False: nothing to
        write, or what may not leave yet waits for end_turn(). Check `due`
        after it."""
        flags = self.flags.get(cid, _WAITED)
        if cid in self.waiting or self.spent >= self.per_turn or not (flags & _ADMITTED or self.idle()):
            self._put_off(cid, data, flags)
            return False
        self.flags[cid] = (flags | _ADMITTED) & ~_WAITED
        self.spent += 1
        if self.spent >= self.per_turn:
            self.due = True  # the allowance is used up: renewed after this turn
        self.driver.data_received(cid, data)
        if self.output.unsynced():
            # What may leave before the store's sync (deliveries) goes now;
            # its acks wait for the sync at the end of the turn.
            if self.driver.flush(False) or self.output.waiting:
                self.due = True
            return False
        return True

    def _put_off(self, cid, data, flags):
        waiting = self.waiting.get(cid)
        if waiting is not None:
            # More input before its turn came: kept after the rest, and the
            # socket is not read until then.
            self.waiting[cid] = waiting + data
            if not flags & _PAUSED:
                self.flags[cid] = flags | _PAUSED
                self.driver.hold(cid, HELD_INPUT, True)
            return
        self.waiting[cid] = bytes(data)  # (the shell may reuse its buffer)
        (self.again if flags & _WAITED else self.first).append(cid)
        self.flags[cid] = flags | _WAITED
        self.due = True

    def waits(self, cid):
        """Whether input of `cid` waits for its turn."""
        return cid in self.waiting

    def close_after(self, cid):
        """The peer of `cid` ended its side (EOF) after input still waiting:
        that input runs in its turn, then the connection is closed."""
        self.flags[cid] = self.flags.get(cid, 0) | _EOF

    def run_now(self, cid):
        """Hand the input of `cid` put off to the driver now (its turn, or
        the end of its connection: the shell calls it before
        Driver.connection_lost, so nothing it sent is lost)."""
        flags = self.flags.get(cid, 0) | _ADMITTED
        data = self.waiting.pop(cid, None)
        if flags & _PAUSED:
            flags &= ~_PAUSED
            self.driver.hold(cid, HELD_INPUT, False)
        self.flags[cid] = flags
        if data is not None:
            self.driver.data_received(cid, data)

    def forget(self, cid):
        """The connection `cid` is gone (after run_now and Driver.connection_lost)."""
        self.flags.pop(cid, None)

    def end_turn(self):
        """At the end of a loop turn (when `due`): a new allowance, up to
        `per_turn` of the input put off, one flush (and one store sync) for
        them all. True: call it again on the next turn (input still waits,
        or a retained replay goes on)."""
        self.due = False
        self.spent = 0
        n = self.per_turn
        ended = None
        for queue in (self.first, self.again):
            taken = 0
            while taken < len(queue) and n:
                cid = queue[taken]
                taken += 1
                if cid in self.waiting:  # (else lost or run meanwhile)
                    self.run_now(cid)
                    n -= 1
                    if self.flags.get(cid, 0) & _EOF:
                        if ended is None:
                            ended = []
                        ended.append(cid)
            del queue[:taken]
        driver = self.driver
        again = driver.flush()
        if ended is not None:
            for cid in ended:
                handle = driver.handles[cid]
                if handle is not None:
                    handle.close()  # as the shell would have after the EOF
        if not self.idle():
            self.due = True
        return again or self.due
