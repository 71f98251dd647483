"""An MQTT-SN listener: one UDP socket feeding the core's gateway
(common/mqttsn/gateway.py, docs/mqtt-sn.md).

The gateway decides everything; this endpoint moves datagrams and time.
Each datagram goes to `Gateway.datagram_received` with the sender's
(host, port) as its opaque address, then `pump()` and the datagrams the
gateway has for its clients are sent. The gateway's timers (keep-alive,
sleep expiry, retransmission) run from its `tick()`, at the deadline it
returns or every second at most (a client's Duration is whole seconds)
while it has one; with none (no client with a Duration, nothing to
resend), no timer runs until the next pump (a datagram, a wake). When the broker writes to an SN client (inside the driver's
flush) the gateway calls `wake`: the endpoint pumps on the next loop turn,
never from inside the flush. A fault of the core on one datagram or tick is
logged and contained: the listener serves on (asyncio would close the
socket of a protocol whose callback raised).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from common.compat import TICKS_MASK, ticks_diff
from common.mqttsn.gateway import Gateway
from common.mqttsn.settings import sn_settings
from cpython_host.transports.events import ConnectionEvents

log = logging.getLogger("siskin.host")

TICK_MAX_S = 1.0  # the gateway's timers run at least this often


def ticks_ms() -> int:
    """The gateway's clock: wrapping ms ticks, as the core's compat.ticks_diff expects."""
    return int(time.monotonic() * 1000) & int(TICKS_MASK)


def address_text(addr: Any) -> str:
    """A UDP sender's (host, port[, ...]) as text for the log and the broker."""
    host = addr[0]
    return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"


class SnEndpoint(asyncio.DatagramProtocol):
    """One MQTT-SN listener's socket and gateway."""

    def __init__(self, events: ConnectionEvents, listening: Any) -> None:
        self.events = events
        self.listening = listening
        self.gateway: Gateway | None = None  # made once bound (whether it is loopback only is known then)
        self.transport: asyncio.DatagramTransport | None = None
        self.loop = asyncio.get_running_loop()
        self.pump_scheduled = False
        self.timer: asyncio.TimerHandle | None = None

    def start(self, loopback: bool) -> None:
        cfg = self.listening.config
        settings = sn_settings(cfg.where, cfg.sn_values(), loopback, cfg.key)
        if settings.advertise_to is not None and self.transport is not None:
            # ADVERTISE (§6.1) goes to a broadcast address, as a rule: the socket must be allowed to
            self.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        make_aead: Callable[[bytes], Any] | None = None
        if settings.keys:  # every datagram sealed (common/mqttsn/envelope.py)
            from cpython_host.runtime import crypto

            make_aead = crypto.make_aead
        self.gateway = Gateway(self.events.driver, settings, ticks_ms, address_text, self.wake, make_aead)
        self._on_timer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        gw = self.gateway
        if gw is None or self.events.is_stopping():
            return
        try:
            gw.datagram_received(addr[:2], data)
        except Exception:
            log.exception(
                "MQTT-SN datagram from %s: a fault of the gateway; the datagram is dropped", address_text(addr)
            )
        self.pump()

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for an earlier datagram (a client gone): its keep-alive tells

    def wake(self) -> None:
        if not self.pump_scheduled:
            self.pump_scheduled = True
            self.loop.call_soon(self.pump)

    def pump(self) -> None:
        self.pump_scheduled = False
        gw = self.gateway
        if gw is None:
            return
        try:
            gw.pump()
        except Exception:
            log.exception("MQTT-SN listener %s: a fault of the gateway", self.listening.name)
        self._send()
        if self.timer is None:
            self._on_timer()  # the gateway may have a deadline now (a keep-alive, a resend, §6.13)
        events = self.events
        events.flush_soon()  # what the gateway's clients made the broker write to others
        if events.is_stopping():
            events.note_closed()  # (its clients' connections end with the broker's shutdown)

    def _send(self) -> None:
        assert self.gateway is not None
        out = self.gateway.take_datagrams()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        for addr, data in out:
            transport.sendto(data, addr)

    def _on_timer(self) -> None:
        gw = self.gateway
        if gw is None:
            return
        wait: float | None = TICK_MAX_S  # (after a fault: again in a second)
        try:
            due = gw.tick()
            wait = None if not due else min(max(0, ticks_diff(due, ticks_ms())) / 1000, TICK_MAX_S)
        except Exception:
            log.exception("MQTT-SN listener %s: a fault of the gateway's timers", self.listening.name)
        self._send()
        # nothing due: no timer; the next datagram starts it again
        self.timer = None if wait is None else self.loop.call_later(wait, self._on_timer)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()


async def open_sn(events: ConnectionEvents, listening: Any) -> tuple[SnEndpoint, list[Any]]:
    """Bind an MQTT-SN listener's UDP socket; (its endpoint, the bound names). OSError if it cannot."""
    cfg = listening.config
    loop = asyncio.get_running_loop()
    transport, endpoint = await loop.create_datagram_endpoint(
        lambda: SnEndpoint(events, listening), local_addr=(cfg.host, cfg.port)
    )
    return endpoint, [transport.get_extra_info("sockname")]
