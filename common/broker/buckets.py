# Token bucket tables for the rate limits (ratelimit.py: a client's own;
# rate_groups.py: a user's, a listener's), refilled from the shell's
# millisecond ticks.
#
# Theory of operation. A table has one bucket per kind (PUBLISHes, PUBLISH
# bytes, subscribed filters) per slot, in lists made at start, and each
# bucket its rate (the table's, or its listener's own: rate_listeners.py;
# 0: that kind is off for the slot). A bucket holds at most its rate (one
# second's worth) and earns rate x ms / 1000
# tokens for the ms passed since the slot's last refill, in integers: the
# thousandths of a token left over are carried per bucket, so that however
# the refills fall the long-run rate is exact. The arithmetic is split so
# that every product stays below 2**30 (small ints on a board) for rates
# up to a million a second and refills up to a second apart.

from common.compat import ticks_deadline, ticks_diff


class Buckets:
    """tokens[kind][slot], their carry and the ms tick of each slot's last refill."""

    def __init__(self, rates, slots):
        self.default = rates  # kind -> tokens a second of a new slot
        self.rates = [[rate] * slots for rate in rates]  # kind -> slot -> its tokens a second (0: off)
        self.tokens = [[rate] * slots for rate in rates]
        self.carry = [[0] * slots for _ in rates]  # thousandths of a token earned, not yet whole
        self.last = [0] * slots  # slot -> the ms tick of its last refill

    def grow(self):
        """One more slot (full)."""
        for kind in range(len(self.rates)):
            rate = self.default[kind]
            self.rates[kind].append(rate)
            self.tokens[kind].append(rate)
            self.carry[kind].append(0)
        self.last.append(0)

    def fill(self, slot, ms):
        for kind in range(len(self.rates)):
            self.tokens[kind][slot] = self.rates[kind][slot]
            self.carry[kind][slot] = 0
        self.last[slot] = ms

    def refill(self, slot, ms):
        """What `slot` earned since its last refill, up to its rates."""
        passed = ticks_diff(ms, self.last[slot])
        if passed <= 0:
            return
        self.last[slot] = ms
        seconds = passed // 1000
        passed %= 1000
        for kind in range(len(self.rates)):
            rate = self.rates[kind][slot]
            if not rate:
                continue
            tokens = self.tokens[kind]
            carry = self.carry[kind]
            t = tokens[slot]
            if t >= rate:
                continue  # full (and its carry 0)
            # rate x passed / 1000 as (1000 q + r) x passed / 1000.
            x = rate % 1000 * passed + carry[slot]
            t += rate * seconds + rate // 1000 * passed + x // 1000
            if t >= rate:
                tokens[slot] = rate
                carry[slot] = 0
            else:
                tokens[slot] = t
                carry[slot] = x % 1000

    def holds(self, slot, n, size):
        """Whether `slot`'s buckets hold `n` PUBLISHes and `size` bytes of them (a kind off holds any)."""
        rates = self.rates
        tokens = self.tokens
        return (not rates[0][slot] or tokens[0][slot] >= n) and (not rates[1][slot] or tokens[1][slot] >= size)

    def in_debt(self, slot):
        for kind in range(len(self.rates)):
            if self.tokens[kind][slot] < 0:
                return True
        return False

    def full(self, slot):
        for kind in range(len(self.rates)):
            if self.tokens[kind][slot] < self.rates[kind][slot]:
                return False
        return True

    def paid_at(self, slot):
        """The ms tick at which every bucket of `slot` is out of debt (0: none is in debt)."""
        wait = -1
        for kind in range(len(self.rates)):
            t = self.tokens[kind][slot]
            if t < 0:
                rate = self.rates[kind][slot]
                need = (-t * 1000 - self.carry[kind][slot] + rate - 1) // rate
                if need > wait:
                    wait = need
        return ticks_deadline(self.last[slot], wait) if wait >= 0 else 0
