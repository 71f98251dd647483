# The start of serving (Server.start, when Server.serve begins): the
# listening socket, the slots in the poller (firmware/poller.py), the
# accept and timer tasks, the MQTT-SN port, the
# bridges and the PPP uplink started, and the "listening on" line. Run once
# and unloaded after it (as firmware/stopping.py is loaded only when the
# stop begins): a serving board keeps none of this code.

import asyncio
import socket

from firmware import poller
from firmware.slot import Slot


def start(server):
    """Listen and start everything that serves; returns the bound port."""
    opts = server.opts
    addr = socket.getaddrinfo(server.host, server.port)[0][-1]
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr)
    s.listen(opts["backlog"])
    s.setblocking(False)
    server.lsock = s
    poller.install(server.slots, Slot.read_ready)
    server.accept_task = asyncio.create_task(server.accept_loop())
    server.clock_task = asyncio.create_task(server.timer_loop())
    log = server.log.log
    if server.sn is not None:
        keys = len(server.sn.settings.keys)
        sealed = "; %d client keys: every datagram sealed" % keys if keys else ""
        log(20, "MQTT-SN (UDP) on %s:%d%s" % (server.host, server.sn.start(server.host), sealed))
    if server.bridges:
        from firmware.bridge import start_bridges  # only with bridges: RAM

        server.bridge_runners = start_bridges(server, server.bridges)
    if server.uplink is not None:
        from firmware.uplink import start_uplink  # only with a PPP uplink: RAM

        server.uplink_task = start_uplink(server, server.uplink)
    s = server.driver.broker.settings
    slots = len(server.slots)
    log(
        20,
        "listening on %s:%d (MQTT 3.1.1 + 5.0%s; %d sockets: %d clients + %d for refusals)"
        % (
            server.host,
            server.port,
            " over TLS" if server.tls is not None else "",
            slots + 1,
            s.max_connections,
            slots - s.max_connections,
        ),
    )
    return server.port
