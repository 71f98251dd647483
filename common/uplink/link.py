"""The PPP uplink's supervisor, sans-I/O: when to dial, how long a dial and
the PPP negotiation may take, when to redial, and the counts.

Theory of operation
-------------------
States, in order:

    WAITING      until `retry_at` (the back-off; 0 = at once)
    DIALING      the modem's dial-up script runs (dialscript.py; skipped
                 without one: a null-modem cable or a modem already in data mode)
    NEGOTIATING  PPP (LCP, PAP/CHAP, IPCP) until the link has an address,
                 at most `connect_timeout_ms`
    UP           the link carries IP; the shell watches it

The shell (firmware/uplink.py) does the I/O and reports: `dialing(now)`,
`negotiating(now)` (returns the deadline), `up(now, address)`,
`failed(now, why)` (a script step or the negotiation did not succeed) and
`lost(now, why)` (an UP link went down). A failure waits the back-off of
the failures in a row (common/backoff.py: 1, 2, 4 ... `backoff_max_ms`,
half of it random); a link lost after it was up redials after the first
step of it. Every dial, failure and drop is counted, logged with its
reason, and shown in $SYS/broker/uplink/<name>/ (`sys_values`).
"""

from common.backoff import backoff_ms
from common.compat import ticks_deadline, ticks_diff

WAITING = 0
DIALING = 1
NEGOTIATING = 2
UP = 3
STATE_NAMES = ("waiting", "dialing", "negotiating", "up")

SYS_PREFIX = "$SYS/broker/uplink/"


class Uplink:
    def __init__(self, name, backoff_min_ms, backoff_max_ms, connect_timeout_ms, entropy, log):
        self.name = name
        self.backoff_min_ms = backoff_min_ms
        self.backoff_max_ms = backoff_max_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.entropy = entropy
        self.log = log  # log(level, text)
        self.state = WAITING
        self.retry_at = 0  # 0: dial at once
        self.address = ""
        self.dials = 0
        self.failures = 0  # all failed attempts
        self.in_a_row = 0  # failed attempts since the link was last up
        self.drops = 0  # links lost after they were up
        self.last_error = ""

    def due(self, now_ms):
        """True when a WAITING link should dial now."""
        return self.state == WAITING and (not self.retry_at or ticks_diff(now_ms, self.retry_at) >= 0)

    def wait_ms(self, now_ms):
        """ms until the next dial (0: due)."""
        if self.state != WAITING or not self.retry_at:
            return 0
        left = ticks_diff(self.retry_at, now_ms)
        return left if left > 0 else 0

    def dialing(self, now_ms):
        self.state = DIALING
        self.dials += 1
        self.log(20, "uplink %s: dial %d" % (self.name, self.dials))

    def negotiating(self, now_ms):
        """PPP started: the deadline for its address."""
        self.state = NEGOTIATING
        return ticks_deadline(now_ms, self.connect_timeout_ms)

    def up(self, now_ms, address):
        self.state = UP
        self.address = address
        self.in_a_row = 0
        self.log(20, "uplink %s: up, address %s (dial %d)" % (self.name, address, self.dials))

    def failed(self, now_ms, why):
        """A dial that did not bring the link up: back off."""
        self.failures += 1
        self.in_a_row += 1
        self.last_error = why
        delay = backoff_ms(self.backoff_min_ms, self.backoff_max_ms, self.in_a_row - 1, self.entropy)
        self._wait(now_ms, delay)
        self.log(
            30,
            "uplink %s: dial %d failed: %s; redialling in %d ms (%d failed in a row, %d in all)"
            % (self.name, self.dials, why, delay, self.in_a_row, self.failures),
        )

    def lost(self, now_ms, why):
        """An UP link went down: redial after the first step of the back-off."""
        self.drops += 1
        self.last_error = why
        delay = backoff_ms(self.backoff_min_ms, self.backoff_max_ms, 0, self.entropy)
        self._wait(now_ms, delay)
        self.log(
            30, "uplink %s: link lost: %s; redialling in %d ms (%d lost so far)" % (self.name, why, delay, self.drops)
        )

    def _wait(self, now_ms, delay):
        self.state = WAITING
        self.address = ""
        self.retry_at = ticks_deadline(now_ms, delay)

    def sys_values(self):
        """(topic, text) for $SYS/broker/uplink/<name>/..."""
        base = SYS_PREFIX + self.name + "/"
        return [
            (base + "state", STATE_NAMES[self.state]),
            # (an empty retained payload would clear the topic: "-" for none)
            (base + "address", self.address or "-"),
            (base + "dials", str(self.dials)),
            (base + "failures", str(self.failures)),
            (base + "lost", str(self.drops)),
            (base + "last_error", self.last_error[:120] or "-"),
        ]
