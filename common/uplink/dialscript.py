"""A modem's dial-up script, sans-I/O: AT commands out, the modem's answers in.

Theory of operation
-------------------
A script is a tuple of steps (send, expect, timeout_ms), e.g.

    ("AT", b"OK", 2000), ("ATE0", b"OK", 2000),
    ('AT+CGDCONT=1,"IP","internet"', b"OK", 5000), ("ATD*99#", b"CONNECT", 30000)

`start(now)` returns the first command (with its carriage return) for the
shell to write; the shell feeds every byte the modem sends (`feed`) and
calls `tick(now)` when `deadline` passes; each returns the next bytes to
write (b"" for none). A step ends when a whole answer line starts with its
`expect` ("CONNECT 115200" answers "CONNECT"), and fails on a V.250 failure
answer (ERROR, NO CARRIER, BUSY, NO DIALTONE, NO ANSWER, +CME ERROR) or when
its timeout passes first; then `state` is FAILED and `reason` says which
step, what it sent and what the modem answered. A step with an empty
`expect` is a pause: it ends, never fails, when its timeout passes. After
the last step `state` is DONE and the line carries PPP.

Answers are read as lines, so a modem's echo of the command ("AT+CGDCONT=..."
before ATE0 switched it off) never matches; the unfinished line is bounded
(MAX_LINE: a modem that sends garbage without line ends costs no more).
What the modem sends after the last expected line belongs to PPP; the peer
repeats its first LCP packets, so the shell may drop it.
"""

from common.compat import ticks_deadline, ticks_diff

RUNNING = 0
DONE = 1
FAILED = 2

# V.250 final result codes (and 3GPP 27.007's) that end a command in failure.
FAILURES = (b"ERROR", b"NO CARRIER", b"BUSY", b"NO DIALTONE", b"NO ANSWER", b"+CME ERROR")
MAX_LINE = 128  # bytes of an unfinished answer line kept


class DialScript:
    def __init__(self, steps):
        self.steps = steps
        self.state = RUNNING
        self.index = -1
        self.reason = ""
        self.deadline = 0
        self.line = b""

    def start(self, now_ms):
        """The first command to write."""
        return self._next(now_ms)

    def _next(self, now_ms):
        self.index += 1
        self.line = b""
        if self.index >= len(self.steps):
            self.state = DONE
            self.deadline = 0
            return b""
        send, _expect, timeout_ms = self.steps[self.index]
        self.deadline = ticks_deadline(now_ms, timeout_ms)
        return send.encode() + b"\r" if send else b""

    def _fail(self, why):
        send = self.steps[self.index][0]
        self.reason = "step %d of %d (%r): %s" % (self.index + 1, len(self.steps), send, why)
        self.state = FAILED
        self.deadline = 0

    def feed(self, data, now_ms):
        """Bytes the modem sent; the next command to write, or b""."""
        if self.state != RUNNING:
            return b""
        expect = self.steps[self.index][1]
        start = 0
        n = len(data)
        for i in range(n + 1):
            if i < n and data[i] != 13 and data[i] != 10:
                continue
            part = data[start:i]
            start = i + 1
            if i == n:  # the unfinished line, bounded
                line = self.line + part
                self.line = line[len(line) - MAX_LINE :] if len(line) > MAX_LINE else line
                break
            line = self.line + part
            self.line = b""
            if not line:
                continue
            if expect and line.startswith(expect):
                return self._next(now_ms)
            for code in FAILURES:
                if line.startswith(code):
                    self._fail("the modem answered %r" % line[:MAX_LINE])
                    return b""
        return b""

    def tick(self, now_ms):
        """Past the step's deadline: a pause ends, a command fails; the next bytes to write."""
        if self.state != RUNNING or ticks_diff(now_ms, self.deadline) < 0:
            return b""
        _send, expect, timeout_ms = self.steps[self.index]
        if not expect:
            return self._next(now_ms)
        self._fail("no %r within %d ms" % (expect, timeout_ms))
        return b""
