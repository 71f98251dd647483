"""Per-client figures for the status page: messages in and out, connected since, last seen.

The core counts them only when the shell gives it somewhere to (Stats.by_client,
common/broker/broker.py): a Connection has no counter of its own, because
the boards share that class and pay for each field in every client's RAM.
The host's web listener installs one of these: two lists indexed by
connection id that the core increments on each PUBLISH in and out (an
index and an add; nothing allocated), the wall time each CONNECT was
accepted, and the wall time each session lost its client, by client id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# Slack of the last-seen table over the sessions held: beyond it, the
# entries of sessions that ended are forgotten (a client id is network input).
SEEN_SLACK = 64


class ClientFigures:
    def __init__(self, sessions: dict[str, Any], clock: Callable[[], float] = time.time) -> None:
        self.sessions = sessions  # Broker.sessions.by_client_id: which last-seen entries still matter
        self.clock = clock
        self.received: list[int] = []  # PUBLISH packets from the client on connection id i
        self.sent: list[int] = []  # PUBLISH packets to it
        self.since: list[float] = []  # wall time its CONNECT was accepted
        self.last_seen: dict[str, float] = {}  # client id -> wall time its session lost its client

    def connected(self, cid: int) -> None:
        """A CONNECT on connection `cid` was accepted: its counts start at 0."""
        while len(self.since) <= cid:
            self.received.append(0)
            self.sent.append(0)
            self.since.append(0.0)
        self.received[cid] = 0
        self.sent[cid] = 0
        self.since[cid] = self.clock()

    def detached(self, client_id: str) -> None:
        """The session of `client_id` lost its client (closed, kicked, taken over)."""
        seen = self.last_seen
        seen[client_id] = self.clock()
        if len(seen) > 2 * len(self.sessions) + SEEN_SLACK:
            for gone in [c for c in seen if c not in self.sessions]:
                del seen[gone]


def install(broker: Any) -> ClientFigures:
    """Have `broker` count per client from now on (before any connection:
    a connection id the lists do not cover yet is added at its CONNECT)."""
    figures = ClientFigures(broker.sessions.by_client_id)
    for conn in broker.connections.by_id:
        figures.connected(conn.cid)  # (none yet, unless installed late: counted from here)
    broker.stats.by_client = figures
    return figures
