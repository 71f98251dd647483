# Mosquitto's $SYS/broker/load/...: how fast some counters grow, per minute,
# as exponentially decaying moving averages over 1, 5 and 15 minutes (as
# Unix's load average and Mosquitto's sys_tree.c compute them): at each $SYS
# round, dt seconds after the last, with r = the counter's growth * 60 / dt,
#
#     average = r + exp(-dt / horizon) * (average - r)
#
# Integers only (a board's float is a heap object): the averages in
# hundredths of a unit per minute, exp(-1 s / horizon) in 24-bit fixed point
# raised to dt by squaring, rounded at each step. Shown with two decimals, as Mosquitto does. Once
# per round (sys_interval), never on the message path: it only reads the
# counters the core keeps anyway. Loaded with $SYS only (sys_topics.py).

SHIFT = 24
ONE = 1 << SHIFT  # 1.0 in fixed point
HALF = ONE >> 1
# exp(-1/60), exp(-1/300), exp(-1/900) in fixed point
HORIZONS = (("1min", 16499913), ("5min", 16721385), ("15min", 16758585))

# (topic under load/, snapshot key or None: the sum of the drops), Mosquitto's names.
LOAD_FIGURES = (
    ("messages/received", "messages_received"),  # PUBLISHes (Siskin's messages/received)
    ("messages/sent", "messages_sent"),
    ("publish/received", "messages_received"),
    ("publish/sent", "messages_sent"),
    ("publish/dropped", None),
    ("bytes/received", "bytes_received"),
    ("bytes/sent", "bytes_sent"),
    ("connections", "connections_total"),  # network connections accepted
    ("sockets", "connections_total"),
)


def decay(factor, seconds):
    """factor ** seconds, both in fixed point (factor < ONE)."""
    out = ONE
    while seconds:
        if seconds & 1:
            out = (out * factor + HALF) >> SHIFT
        factor = (factor * factor + HALF) >> SHIFT
        seconds >>= 1
    return out


def _count(snap, key, dropped):
    return dropped if key is None else snap[key]


def hundredths(value):
    """'12.34' for 1234."""
    return "%d.%02d" % (value // 100, value % 100)


class Load:
    """The averages of LOAD_FIGURES (hundredths per minute), one row each."""

    def __init__(self, snap, dropped, now):
        self.at = now
        self.last = [_count(snap, key, dropped) for _, key in LOAD_FIGURES]
        self.averages = [[0, 0, 0] for _ in LOAD_FIGURES]

    def update(self, snap, dropped, now):
        """Take the counters' growth since the last round (none if no second passed)."""
        dt = now - self.at
        if dt <= 0:
            return
        self.at = now
        factors = [decay(f, dt) for _, f in HORIZONS]
        for i in range(len(LOAD_FIGURES)):
            count = _count(snap, LOAD_FIGURES[i][1], dropped)
            rate = (count - self.last[i]) * 6000 // dt  # hundredths per minute
            self.last[i] = count
            row = self.averages[i]
            for h in range(3):
                # (rounded towards the rate: it reaches it, not a hundredth off)
                d = row[h] - rate
                row[h] = rate + (factors[h] * d >> SHIFT if d >= 0 else -(factors[h] * -d >> SHIFT))

    def values(self):
        """(topic suffix under $SYS/broker/, text) of each average."""
        out = []
        for i in range(len(LOAD_FIGURES)):
            base = "load/" + LOAD_FIGURES[i][0] + "/"
            row = self.averages[i]
            for h in range(3):
                out.append((base + HORIZONS[h][0], hundredths(row[h])))
        return out
