# A bridge's figures besides its counters: its state's name, the link's
# health, the send rate, and its $SYS/broker/bridge/<name>/ values
# (link.py publishes them; the host's status page and metrics read them).
# Bridge (bridge.py) takes them from Figures.

from common.client.client import CONNECTED, DISCONNECTED
from common.compat import ticks_diff

SYS_PREFIX = "$SYS/broker/bridge/"
# Its state's name: the upstream client's state, or "paused", or STALLED.
STATE_NAMES = ("disconnected", "connecting", "connected")
STALLED = "stalled"  # connected, an answer overdue


class Figures:
    """What Bridge shows of itself (its attributes: up, paused, stalled,
    address, name, sent, received, rate, rate_mark, the counters)."""

    def _state(self):
        self.state_changed = True  # (link.py publishes the figures again)

    def state_name(self):
        if self.paused and self.up.state == DISCONNECTED:
            return "paused"
        if self.stalled and self.up.state == CONNECTED:
            return STALLED
        return STATE_NAMES[self.up.state]

    def health(self, ms):
        """(in flight upstream, the upstream's window, s since the last upstream
        ack or -1): the link's figures besides the counters."""
        up = self.up
        since = ticks_diff(ms, up.acked_at) // 1000 if up.acked_at else -1
        return len(up.inflight), up.window_max, since

    def update_rate(self, ms):
        """The send rate since the last call (at least a second ago)."""
        at, sent = self.rate_mark
        elapsed = ticks_diff(ms, at)
        if at and elapsed < 1000:
            return
        if at:
            self.rate = (self.sent - sent) * 1000 // elapsed
        self.rate_mark = (ms or 1, self.sent)

    def sys_values(self, queued, queued_bytes, ms, oldest=-1):
        """(topic, text) for $SYS; `queued`/`queued_bytes`: the local session's
        queue, `oldest`: the age in s of its oldest message (-1 none: the
        shell reads them)."""
        base = SYS_PREFIX + self.name + "/"
        up = self.up
        inflight, window, since = self.health(ms)
        self.update_rate(ms)
        return [
            (base + "state", self.state_name()),
            # (an empty retained payload would clear the topic: "-" for none)
            (base + "address", self.address if up.state == CONNECTED else "-"),
            (base + "queued", str(queued + len(up.queue))),
            (base + "queued_bytes", str(queued_bytes)),
            (base + "oldest_queued_age", str(oldest) if oldest >= 0 else "-"),
            (base + "inflight", str(inflight)),
            (base + "inflight_max", str(window) if up.state == CONNECTED else "-"),
            (base + "last_ack_age", str(since) if since >= 0 else "-"),
            (base + "send_rate", str(self.rate)),
            (base + "sent", str(self.sent)),
            (base + "received", str(self.received)),
            (base + "dead_lettered", str(self.dead_lettered)),
            (base + "dropped", str(self.dropped)),
            (base + "retried", str(up.retried)),
            (base + "faults", str(self.faults)),
            (base + "restarts", str(self.restarts)),
            (base + "last_error", self.last_error or "-"),
            (base + "refused_subscriptions", " ".join([t[0] for t in self.refused]) or "-"),
            # sparkplug_births: births over the bound, not kept for a replay ("-": off)
            (base + "births_unkept", str(self.births.unkept) if self.births is not None else "-"),
        ]
