"""The $SYS publisher: broker statistics as retained QoS 0 messages.

Every `sys_interval` seconds (0 = off) the host publishes, through
broker.publish(), the topics below under `$SYS/broker/`. They are retained,
so a client that subscribes to `$SYS/#` gets the latest values at once. Only
the broker publishes there: the core refuses a client's PUBLISH into `$SYS/`.

The values are read from the core (broker.stats and its pools); counters are
CPython ints here, so the 2**30 small-int concern of the MicroPython shell
does not apply and they are never reset.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from common.broker import VERSION
from common.connection import CONNECTED

if TYPE_CHECKING:
    from common.broker import Broker

PREFIX = "$SYS/broker/"

# messages/dropped/<name>: Stats attribute. messages/dropped is their sum.
DROP_COUNTERS = (
    ("qos0", "dropped_qos0"),  # QoS 0 for a slow reader over max_out_buffer, or an offline session
    ("queue_full", "dropped_queue_full"),  # a session's queue (count or bytes) was full
    ("too_large", "dropped_too_large"),  # above a v5 client's Maximum Packet Size
    ("no_slab", "dropped_no_slab"),  # the message pool (max_messages) was exhausted
    ("retained", "dropped_retained"),  # the retained store was full: not kept
)

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
    _PAGE = 4096


def rss_bytes() -> int | None:
    """Resident set size of this process from /proc/self/statm, or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def sys_values(broker: Broker, now: int) -> list[tuple[str, str]]:
    """(topic suffix, text value) for every $SYS topic, in a stable order."""
    st = broker.stats
    started = broker.started if broker.started is not None else now
    connected = 0
    for conn in broker.connections.by_id:
        if conn.state == CONNECTED:
            connected += 1
    drops = [(name, getattr(st, attr)) for name, attr in DROP_COUNTERS]
    values = [
        ("version", "siskin " + VERSION),
        ("uptime", str(now - started)),
        ("clients/connected", str(connected)),
        ("clients/total", str(broker.sessions.count())),
        ("clients/maximum", str(st.clients_maximum)),
        ("clients/refused", str(st.refused_connections)),
        ("connections/total", str(st.connections_total)),
        ("messages/received", str(st.messages_received)),
        ("messages/sent", str(st.messages_sent)),
        ("messages/dropped", str(sum(v for _n, v in drops))),
    ]
    values.extend(("messages/dropped/" + name, str(v)) for name, v in drops)
    values += [
        ("messages/expired", str(st.expired)),
        ("bytes/received", str(st.bytes_received)),
        ("bytes/sent", str(st.bytes_sent)),
        ("subscriptions/count", str(broker.sessions.sub_pool.in_use)),
        ("retained messages/count", str(broker.routing.retained.count())),
    ]
    rss = rss_bytes()
    if rss is not None:
        values.append(("heap/current", str(rss)))
    return values


class SysPublisher:
    """Publishes the $SYS topics when due; call maybe_publish(now) every tick."""

    def __init__(self, broker: Broker, interval: int) -> None:
        self.broker = broker
        self.interval = interval
        self.next_due: int | None = None

    def maybe_publish(self, now: int) -> bool:
        if self.interval <= 0:
            return False
        if self.next_due is not None and now < self.next_due:
            return False
        self.next_due = now + self.interval
        self.publish(now)
        return True

    def publish(self, now: int) -> None:
        broker = self.broker
        for suffix, text in sys_values(broker, now):
            broker.publish(PREFIX + suffix, text.encode(), 0, True, now)
