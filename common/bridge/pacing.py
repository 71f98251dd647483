"""Egress pacing: how fast a bridge may send up (publishes/s, bytes/s).

Cloud brokers throttle a connection that publishes too fast (AWS IoT Core:
100 publishes/s and 512 KB/s per connection, then it disconnects), and a
bridge replaying its backlog after an outage would go as fast as its window
allows. The bridge asks its Pacer before each message goes up
(bridge._outbound): one goes up only when every bucket is back at zero;
then its cost (1 publish, its topic + payload bytes) is taken, which puts
the bucket in debt until the rate has paid it back. Buckets save up at most
one publish (CREDIT: a late wake-up of the shell does not slow the pace)
and no bytes, so no window of a second ever holds more than the rate plus
one (bytes: the rate plus the last message). Integers only: a bucket
counts thousandths, refilled by elapsed ms x rate.

What cannot go now waits here in arrival order (FIFO: the local session's
order, which MQTT's ordering needs; a live message waits behind the
backlog, at most backlog / rate), bounded by the bridge's window (the local
session hands it at most `window` unacknowledged QoS 1/2 messages); QoS 0
beyond `window` waiting is dropped and counted (the bridge's `dropped`).
drain() (the bridge's tick) sends what the buckets allow and says when the
next one may go.
"""

from common.compat import ticks_deadline, ticks_diff

IDLE_MS = 60000  # refill at most this much time at once (keeps products small)
# The most a bucket saves up (thousandths, as a negative debt): one publish,
# so that the shell's late wake-ups do not slow the pace; no bytes.
CREDIT = (-1000, 0)
# defer()'s answers
SEND = 0
WAIT = 1
DROP = 2


class Pacer:
    def __init__(self, publishes, bytes_, limit):
        self.rates = (publishes, bytes_)  # per second, 0 = not paced
        self.debt = [0, 0]  # thousandths owed, per bucket
        self.mark = None  # ticks of the last refill
        self.waiting = []  # messages that could not go yet, in order
        self.limit = limit  # QoS 0 messages beyond this many waiting are dropped
        self.held = 0  # messages that waited (figures)

    def _refill(self, ms):
        if self.mark is None:
            self.mark = ms
            return
        passed = ticks_diff(ms, self.mark)
        if passed <= 0:
            return
        self.mark = ms
        if passed > IDLE_MS:
            passed = IDLE_MS
        for i in range(2):
            if self.rates[i]:
                left = self.debt[i] - passed * self.rates[i]
                self.debt[i] = left if left > CREDIT[i] else CREDIT[i]

    def _take(self, size):
        if self.rates[0]:
            self.debt[0] += 1000
        if self.rates[1]:
            self.debt[1] += size * 1000

    def charge(self, count, size):
        """`count` messages of `size` bytes in all went up outside defer()
        (resent at once after a reconnect): their cost delays the next."""
        if self.rates[0]:
            self.debt[0] += 1000 * count
        if self.rates[1]:
            self.debt[1] += 1000 * size

    def defer(self, pkt, ms, ready):
        """SEND: `pkt` goes up now (its cost taken); WAIT: it is kept here
        (an earlier copy of the same QoS 1/2 packet id replaced in place);
        DROP: a QoS 0 message beyond `limit` waiting. `ready`: the upstream
        is connected (else everything waits: its client would send them all
        at once on reconnect)."""
        self._refill(ms)
        waiting = self.waiting
        if ready and not waiting and self.debt[0] <= 0 and self.debt[1] <= 0:
            self._take(len(pkt.topic) + len(pkt.payload))
            return SEND
        if pkt.qos:
            for i in range(len(waiting)):
                if waiting[i].qos and waiting[i].packet_id == pkt.packet_id:
                    waiting[i] = pkt  # sent again by the local session (DUP)
                    return WAIT
        elif len(waiting) >= self.limit:
            return DROP
        waiting.append(pkt)
        self.held += 1
        return WAIT

    def drain(self, ms, send):
        """send(pkt) each waiting message the buckets allow (call it while
        the upstream is connected); the ticks when the next may go (0:
        none waits)."""
        self._refill(ms)
        while self.waiting and self.debt[0] <= 0 and self.debt[1] <= 0:
            pkt = self.waiting.pop(0)
            self._take(len(pkt.topic) + len(pkt.payload))
            send(pkt)
        if not self.waiting:
            return 0
        wait = 1
        for i in range(2):
            if self.debt[i] > 0:
                ms_left = (self.debt[i] + self.rates[i] - 1) // self.rates[i]
                if ms_left > wait:
                    wait = ms_left
        return ticks_deadline(ms, wait)
