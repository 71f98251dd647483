# The firmware's MQTT-SN port (docs/mqtt-sn.md): one non-blocking UDP socket
# feeding the core's gateway (common/mqttsn/gateway.py), as the host's
# cpython_host/transports/mqttsn_udp.py does. Imported only when the device
# config has an "mqttsn" object (firmware/startup.py): a board without SN
# keeps this module and the gateway's out of its heap.
#
# The gateway decides everything; this moves datagrams and time:
# - a task parks on the socket (firmware/poller.readable, asyncio's own wait,
#   not a slot) and hands every waiting datagram to the gateway, then pumps;
# - the gateway's timers run from the shell's clock (firmware/shell.py
#   Server.timer_loop: its deadline joins the driver's, once a second at most);
# - the gateway's `wake` (the broker wrote to an SN client, inside the
#   driver's flush) sets an event a second task waits on: it pumps on the
#   next turn of the loop, never from inside the flush.
# A fault of the core on one datagram or tick is logged and contained.

import asyncio

from common.broker.limits import ConfigError
from common.compat import ticks_diff
from common.mqttsn.gateway import Gateway
from firmware import poller
from firmware.slot import peer_address

READS_PER_TURN = 8  # datagrams read before the other tasks run again


def sn_port(server, cfg, ticks_ms):
    """The SnPort of the device config's checked "mqttsn" object; off
    loopback only with keys (every datagram sealed) or allow_remote, as on
    the host, since MQTT-SN v1.2 has no authentication. ConfigError for a
    bad value (before the network)."""
    if not server.loopback and not cfg["allow_remote"] and not cfg["keys"]:
        raise ConfigError(
            "mqttsn on host %r, which is not loopback: MQTT-SN v1.2 has no authentication, so anyone who can"
            ' reach this UDP port would publish and subscribe as an anonymous client; give its clients "keys"'
            ' ({"client id": "32 hex digits"}: every datagram sealed), or set "allow_remote": true in the mqttsn'
            " object to serve it anyway (with allow_anonymous and an ACL), docs/mqtt-sn.md" % server.host
        )
    from common.mqttsn.settings import sn_settings

    return SnPort(server, sn_settings("mqttsn", cfg, server.loopback, 0), cfg["port"], ticks_ms)


class SnPort:
    def __init__(self, server, settings, port, ticks_ms):
        self.server = server
        self.settings = settings  # common/mqttsn/settings.py SnSettings
        self.port = port
        self.ticks_ms = ticks_ms
        self.sock = None
        self.gateway = None
        self.woken = asyncio.Event()
        self.tasks = ()

    def start(self, host):
        """Bind the UDP socket and start its tasks; returns the bound port."""
        import socket  # (as in Server.start: loaded by then)

        addr = socket.getaddrinfo(host, self.port, 0, socket.SOCK_DGRAM)[0][-1]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(addr)
        s.setblocking(False)
        self.sock = s
        make_aead = None
        if self.settings.keys:  # every datagram sealed (common/mqttsn/envelope.py): cryptolib's AES
            from firmware.crypto import make_aead
        gw = Gateway(self.server.driver, self.settings, self.ticks_ms, peer_address, self.woken.set, make_aead)
        self.gateway = gw
        self.tasks = (asyncio.create_task(self._reader()), asyncio.create_task(self._pumper()))
        return self.port

    def stop_reading(self):
        """No datagram is taken any more (the broker shuts down); the pumping
        goes on, so that the SN clients' connections end with the others."""
        if self.tasks:
            self.tasks[0].cancel()

    def stop(self):
        for task in self.tasks:
            task.cancel()
        self.tasks = ()
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    async def _reader(self):
        sock = self.sock
        # (one byte more: an overlong one is seen and counted; an envelope adds its own)
        size = self.settings.max_packet_size + self.settings.envelope_overhead + 1
        while True:
            await poller.readable(sock)
            for _ in range(READS_PER_TURN):
                try:
                    data, addr = sock.recvfrom(size)
                except OSError:
                    break  # EAGAIN: none left
                try:
                    self.gateway.datagram_received(addr, data)
                except Exception as e:  # a core bug: this datagram only
                    why = "MQTT-SN datagram from %s: a fault of the gateway (%r)" % (peer_address(addr), e)
                    self.server.log.log(40, why)
            self.pump()

    async def _pumper(self):
        while True:
            await self.woken.wait()
            self.woken.clear()
            self.pump()

    def pump(self):
        try:
            self.gateway.pump()
        except Exception as e:
            self.server.log.log(40, "MQTT-SN: a fault of the gateway (%r)" % (e,))
        self.send()
        self.server.flush()  # what the SN clients made the broker write to others

    def send(self):
        sock = self.sock
        for addr, data in self.gateway.take_datagrams():
            try:
                sock.sendto(data, addr)
            except OSError:
                pass  # no buffer (lwIP) or a client gone: its keep-alive or a retry tells

    def tick(self, limit):
        """Run the gateway's timers; ms until its next deadline, at most `limit`."""
        try:
            due = self.gateway.tick()
        except Exception as e:
            self.server.log.log(40, "MQTT-SN: a fault of the gateway's timers (%r)" % (e,))
            due = 0
        self.send()
        if not due:
            return limit
        return min(max(0, ticks_diff(due, self.ticks_ms())), limit)
