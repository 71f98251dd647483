"""asyncio's own loop on an epoll the plain listeners' hub shares: the host's
only use of private fields of the runtime, quarantined here.

`SharedEpollSelector` is selectors.EpollSelector, whose `select()` also
hands the events of sockets the hub owns (cpython_host/transports/epoll_hub.py) to
`hub.dispatch()` (before the loop runs its own callbacks), so that one
`epoll_wait` per loop turn serves both. To do so it reads two private
fields of EpollSelector, and the hub's accept calls one private method of
socket.socket (the bare system call, without the enum conversions of
accept()): PRIVATE names all three, and tests/host/test_shared_selector.py
fails, naming the one that is missing, on a CPython or PyPy whose library
lacks one, and if another module of the host uses them.
"""

from __future__ import annotations

import asyncio
import math
import select
import selectors
import socket
from typing import Any

# The private names used here: (owner, name, what it is).
PRIVATE = (
    (selectors.EpollSelector, "_selector", "the select.epoll object"),
    (selectors.EpollSelector, "_fd_to_key", "fd -> SelectorKey of the loop's own registrations"),
    (socket.socket, "_accept", "accept(2): (fd, address) without making a socket object"),
)

# Events taken per poll; more stay ready for the next turn (level-triggered).
MAX_EVENTS = 1024


# raw_accept(lsock) -> (fd, address): the system call alone (the method
# itself, not a wrapper: an accept storm pays no extra call).
raw_accept = socket.socket._accept  # type: ignore[attr-defined]


class SharedEpollSelector(selectors.EpollSelector):
    """asyncio's epoll selector, whose epoll also holds the hub's sockets.

    `select()` is EpollSelector's, except that the events of sockets the hub
    owns go to `hub.dispatch()` (before the loop runs its own callbacks) and
    the loop sees the rest. Without a hub it is EpollSelector.
    """

    def __init__(self) -> None:
        super().__init__()
        self.epoll: Any = self._selector  # type: ignore[attr-defined]  # (selectors' select.epoll)
        self.hub: Any = None  # the EpollHub sharing this epoll (it sets and clears itself)
        self.loop: asyncio.AbstractEventLoop | None = None  # for the exception handler

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            wait = -1.0
        elif timeout <= 0:
            wait = 0.0
        else:  # epoll's resolution is a millisecond: round up, as EpollSelector does
            wait = math.ceil(timeout * 1e3) * 1e-3
        fd_to_key = self._fd_to_key  # type: ignore[attr-defined]
        try:
            events = self.epoll.poll(wait, len(fd_to_key) + MAX_EVENTS)
        except InterruptedError:
            return []
        ready = []
        hub = self.hub
        ours = None
        for fd, ev in events:
            key = fd_to_key.get(fd)
            if key is not None:
                mask = 0
                if ev & ~select.EPOLLIN:
                    mask |= selectors.EVENT_WRITE
                if ev & ~select.EPOLLOUT:
                    mask |= selectors.EVENT_READ
                ready.append((key, mask & key.events))
            elif hub is not None:
                if ours is None:
                    ours = []
                ours.append((fd, ev))
        if ours is not None and hub is not None:
            try:
                hub.dispatch(ours)
            except Exception as e:  # as a failing callback of the loop's would be: logged, the loop goes on
                if self.loop is not None:
                    self.loop.call_exception_handler({"message": "exception in the epoll hub", "exception": e})
        return ready


def new_event_loop() -> asyncio.AbstractEventLoop:
    """asyncio's own loop on a SharedEpollSelector (`loop.shared_selector`)."""
    selector = SharedEpollSelector()
    loop = asyncio.SelectorEventLoop(selector)
    selector.loop = loop
    loop.shared_selector = selector  # type: ignore[attr-defined]
    return loop
