"""A PPP peer's protocol, sans-I/O: HDLC-like framing (RFC 1662), LCP (RFC 1661)
and IPCP (RFC 1332, RFC 1877's DNS options), and a Hayes modem in front of it.

    peer = PppPeer(local="10.0.0.1", remote="10.0.0.2")
    wire_out = peer.feed(bytes_from_the_chip)   # -> bytes to send the chip
    for packet in peer.take_ip(): ...            # IPv4 packets from the chip
    wire_out = peer.send_ip(packet)              # an IPv4 packet to the chip

Theory of operation
-------------------
The host end of the emulated board's UART (tools/emu/ppp_peer.py moves its
IP packets to a TUN device). It is what a cellular modem's network side
looks like to the board:

- Modem: until a dial command, the line is a Hayes command line: "AT...\\r"
  answers "OK", "ATD..." answers "CONNECT 115200" and the line carries PPP;
  when the link ends (either side's LCP Terminate-Request, `hang_up()`) the
  modem answers "NO CARRIER" and takes commands again. `modem=False`: PPP
  from the first byte (a null-modem cable).
- Framing: 0x7E flags, 0x7D escapes, FCS-16. Frames are sent with every
  control character escaped and the address, control and protocol fields in
  full, which every peer must accept whatever it negotiated; received frames
  may have them compressed (ACFC, PFC). A frame with a bad FCS is counted
  and dropped.
- LCP: the board's Configure-Request is acknowledged as it is (MRU, ACCM,
  magic number, PFC, ACFC; an authentication protocol is never asked for by
  the board, only by a server); ours carries a magic number. Echo-Request
  is answered; a Terminate-Request acknowledged and the link ends; an
  unknown protocol (IPV6CP, CCP) gets a Protocol-Reject.
- IPCP: the board asks for address 0.0.0.0 and DNS servers; it gets a
  Configure-Nak with `remote` and `local` as its DNS, then its corrected
  request is acknowledged. Ours carries `local`. When both sides have
  acknowledged, `ip_up` is true and IPv4 (protocol 0x0021) flows.

`events` lists what happened, in words ("LCP opened", "IPCP opened
10.0.0.2", "link down: terminated by the board"), for the log and tests.
"""

from __future__ import annotations

import os
import socket
import struct

FLAG = 0x7E
ESC = 0x7D
PROTO_IP = 0x0021
PROTO_LCP = 0xC021
PROTO_IPCP = 0x8021
CONF_REQ, CONF_ACK, CONF_NAK, CONF_REJ, TERM_REQ, TERM_ACK, CODE_REJ, PROTO_REJ, ECHO_REQ, ECHO_REP = range(1, 11)
LCP_MAGIC = 5
IPCP_ADDRESS = 3
IPCP_DNS1 = 129
IPCP_DNS2 = 131


def _fcs_table() -> list[int]:
    table = []
    for b in range(256):
        v = b
        for _ in range(8):
            v = (v >> 1) ^ 0x8408 if v & 1 else v >> 1
        table.append(v)
    return table


FCS_TABLE = _fcs_table()
FCS_GOOD = 0xF0B8


def fcs16(data: bytes, fcs: int = 0xFFFF) -> int:
    for b in data:
        fcs = (fcs >> 8) ^ FCS_TABLE[(fcs ^ b) & 0xFF]
    return fcs


def encode_frame(protocol: int, payload: bytes) -> bytes:
    """One HDLC-like frame: address, control, protocol in full; every byte below 0x20 escaped."""
    body = bytes((0xFF, 0x03)) + struct.pack(">H", protocol) + payload
    body += struct.pack("<H", fcs16(body) ^ 0xFFFF)
    out = bytearray((FLAG,))
    for b in body:
        if b < 0x20 or b in (FLAG, ESC):
            out += bytes((ESC, b ^ 0x20))
        else:
            out.append(b)
    out.append(FLAG)
    return bytes(out)


class FrameReader:
    """Frames out of a byte stream: (protocol, payload) once the FCS checks."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.escaped = False
        self.bad_fcs = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        frames = []
        for b in data:
            if b == FLAG:
                frame = self._end()
                if frame is not None:
                    frames.append(frame)
            elif b == ESC:
                self.escaped = True
            else:
                self.buf.append(b ^ 0x20 if self.escaped else b)
                self.escaped = False
        return frames

    def _end(self) -> tuple[int, bytes] | None:
        body, self.buf, self.escaped = bytes(self.buf), bytearray(), False
        if len(body) < 4:
            return None  # (back-to-back flags, line noise)
        if fcs16(body) != FCS_GOOD:
            self.bad_fcs += 1
            return None
        body = body[:-2]
        if body[:2] == b"\xff\x03":  # ACFC not in use
            body = body[2:]
        if body[0] & 1:  # PFC: a one-byte protocol
            return body[0], body[1:]
        return (body[0] << 8) | body[1], body[2:]


def options(data: bytes) -> list[tuple[int, bytes]]:
    out = []
    i = 0
    while i + 2 <= len(data):
        kind, length = data[i], data[i + 1]
        if length < 2 or i + length > len(data):
            break
        out.append((kind, data[i + 2 : i + length]))
        i += length
    return out


def unpack_control(payload: bytes) -> tuple[int, int, bytes]:
    """(code, identifier, data) of an LCP/IPCP packet; code 0 (none of ours) for a runt."""
    if len(payload) < 4:
        return 0, 0, b""
    code, ident, length = struct.unpack(">BBH", payload[:4])
    return code, ident, payload[4:length]


def packet(code: int, ident: int, data: bytes) -> bytes:
    return struct.pack(">BBH", code, ident, 4 + len(data)) + data


def option(kind: int, value: bytes) -> bytes:
    return bytes((kind, 2 + len(value))) + value


class PppPeer:
    def __init__(self, local: str, remote: str, modem: bool = True) -> None:
        self.local = socket.inet_aton(local)
        self.remote = socket.inet_aton(remote)
        self.modem = modem
        self.online = not modem  # the line carries PPP (after CONNECT)
        self.command = bytearray()
        self.reader = FrameReader()
        self.magic = os.urandom(4)
        self.ident = 0
        self.events: list[str] = []
        self.ip_in: list[bytes] = []
        self.dials = 0
        self._reset()

    def _reset(self) -> None:
        self.lcp_acked = self.lcp_ours = False  # we acked theirs / they acked ours
        self.ipcp_acked = self.ipcp_ours = False
        self.lcp_sent = self.ipcp_sent = False

    @property
    def lcp_up(self) -> bool:
        return self.lcp_acked and self.lcp_ours

    @property
    def ip_up(self) -> bool:
        return self.lcp_up and self.ipcp_acked and self.ipcp_ours

    def _next_id(self) -> int:
        self.ident = (self.ident + 1) & 0xFF
        return self.ident

    # ------------------------------------------------------------- input

    def feed(self, data: bytes) -> bytes:
        """Bytes from the board; the bytes to send it."""
        if not self.online:
            return self._commands(data)
        out = bytearray()
        for protocol, payload in self.reader.feed(data):
            out += self._frame(protocol, payload)
        return bytes(out)

    def _commands(self, data: bytes) -> bytes:
        out = bytearray()
        for b in data:
            if b not in (13, 10):
                self.command.append(b)
                continue
            line = bytes(self.command).strip().upper()
            self.command = bytearray()
            at = line.rfind(b"AT")  # (what the board's PPP sent after the carrier went: junk before it)
            if at < 0:
                continue
            line = line[at:]
            if line.startswith(b"ATD"):
                self.dials += 1
                self.events.append(f"modem: {line.decode(errors='replace')} -> CONNECT")
                out += b"\r\nCONNECT 115200\r\n"
                self.online = True
                self.reader = FrameReader()
                self._reset()
                break  # what follows is PPP
            if line.startswith(b"AT"):
                self.events.append(f"modem: {line.decode(errors='replace')} -> OK")
                out += b"\r\nOK\r\n"
        return bytes(out)

    def _frame(self, protocol: int, payload: bytes) -> bytes:
        if protocol == PROTO_IP:
            if self.ip_up:
                self.ip_in.append(payload)
            return b""
        if protocol == PROTO_LCP:
            return self._lcp(payload)
        if protocol == PROTO_IPCP:
            return self._ipcp(payload) if self.lcp_up else b""
        if not self.lcp_up:
            return b""
        # IPV6CP, CCP, ...: not spoken here.
        return encode_frame(PROTO_LCP, packet(PROTO_REJ, self._next_id(), struct.pack(">H", protocol) + payload))

    def _lcp(self, payload: bytes) -> bytes:
        code, ident, data = unpack_control(payload)
        out = bytearray()
        if code == CONF_REQ:
            if self.lcp_up:  # renegotiation: everything above starts over
                self.events.append("LCP renegotiated")
                self._reset()
            out += encode_frame(PROTO_LCP, packet(CONF_ACK, ident, data))
            self.lcp_acked = True
            if not self.lcp_sent:
                out += self._lcp_request()
        elif code == CONF_ACK:
            self.lcp_ours = True
        elif code in (CONF_NAK, CONF_REJ):
            out += self._lcp_request()
        elif code == TERM_REQ:
            out += encode_frame(PROTO_LCP, packet(TERM_ACK, ident, b""))
            self._down("terminated by the board")
            out += self._carrier_lost()
        elif code == TERM_ACK:
            self._down("terminated by the peer")
            out += self._carrier_lost()
        elif code == ECHO_REQ:
            out += encode_frame(PROTO_LCP, packet(ECHO_REP, ident, self.magic + data[4:]))
        if self.lcp_up and "LCP opened" not in self.events[-1:]:
            if not (self.ipcp_acked or self.ipcp_ours or self.ipcp_sent):
                self.events.append("LCP opened")
        return bytes(out)

    def _lcp_request(self) -> bytes:
        self.lcp_sent = True
        return encode_frame(PROTO_LCP, packet(CONF_REQ, self._next_id(), option(LCP_MAGIC, self.magic)))

    def _ipcp(self, payload: bytes) -> bytes:
        code, ident, data = unpack_control(payload)
        out = bytearray()
        if code == CONF_REQ:
            wanted = {IPCP_ADDRESS: self.remote, IPCP_DNS1: self.local, IPCP_DNS2: self.local}
            naks = b""
            rejects = b""
            for kind, value in options(data):
                if kind not in wanted:
                    rejects += option(kind, value)
                elif value != wanted[kind]:
                    naks += option(kind, wanted[kind])
            if rejects:
                out += encode_frame(PROTO_IPCP, packet(CONF_REJ, ident, rejects))
            elif naks:
                out += encode_frame(PROTO_IPCP, packet(CONF_NAK, ident, naks))
            else:
                out += encode_frame(PROTO_IPCP, packet(CONF_ACK, ident, data))
                self.ipcp_acked = True
            if not self.ipcp_sent:
                self.ipcp_sent = True
                out += encode_frame(PROTO_IPCP, packet(CONF_REQ, self._next_id(), option(IPCP_ADDRESS, self.local)))
        elif code == CONF_ACK:
            self.ipcp_ours = True
        elif code in (CONF_NAK, CONF_REJ):
            out += encode_frame(PROTO_IPCP, packet(CONF_REQ, self._next_id(), option(IPCP_ADDRESS, self.local)))
        elif code == TERM_REQ:
            out += encode_frame(PROTO_IPCP, packet(TERM_ACK, ident, b""))
            self.ipcp_acked = self.ipcp_ours = self.ipcp_sent = False
        if self.ip_up and not any(e.startswith("IPCP opened") for e in self.events[-1:]):
            self.events.append(f"IPCP opened {socket.inet_ntoa(self.remote)}")
        return bytes(out)

    def _down(self, why: str) -> None:
        self.events.append("link down: " + why)
        self._reset()

    def _carrier_lost(self) -> bytes:
        if not self.modem:
            return b""
        self.online = False
        self.command = bytearray()
        return b"\r\nNO CARRIER\r\n"

    # ------------------------------------------------------------ output

    def send_ip(self, packet_bytes: bytes) -> bytes:
        """An IPv4 packet for the board (dropped while IPCP is not open, and
        anything but IPv4: the host's IPv6 has no link here)."""
        if not self.ip_up or not packet_bytes or packet_bytes[0] >> 4 != 4:
            return b""
        return encode_frame(PROTO_IP, packet_bytes)

    def take_ip(self) -> list[bytes]:
        out, self.ip_in = self.ip_in, []
        return out

    def hang_up(self) -> bytes:
        """Cut the link as a network would: our LCP Terminate-Request, then the carrier."""
        if not self.online:
            return b""
        out = encode_frame(PROTO_LCP, packet(TERM_REQ, self._next_id(), b"hang-up"))
        self._down("hung up by the peer")
        return out + self._carrier_lost()
