"""systemd's readiness protocol (sd_notify), without libsystemd.

Under a unit with Type=notify, systemd sets NOTIFY_SOCKET to a unix
datagram socket (a path, or "@name" for the abstract namespace) and waits
for "READY=1" on it before it counts the service as started; "STOPPING=1"
and "RELOADING=1" (with MONOTONIC_USEC, which systemd >= 253 wants for a
reload) report the other state changes, STATUS= a line `systemctl status`
shows. One datagram per message, sent from the event loop's thread; without
NOTIFY_SOCKET (not run by systemd) every call does nothing. A failure to
send is logged once and otherwise ignored: the broker serves either way.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("siskin.host")


def notify(*fields: str) -> bool:
    """Send "FIELD=value" lines to systemd; True if a NOTIFY_SOCKET took them."""
    where = os.environ.get("NOTIFY_SOCKET")
    if not where:
        return False
    if where[0] == "@":  # abstract namespace
        where = "\0" + where[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto("\n".join(fields).encode(), where)
    except OSError as e:
        log.warning("sd_notify to NOTIFY_SOCKET=%s failed: %s", os.environ.get("NOTIFY_SOCKET"), e.strerror or e)
        return False
    return True


def reloading() -> bool:
    """RELOADING=1 with the monotonic time systemd matches the reload by."""
    return notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
