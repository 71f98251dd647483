"""The emulator's PPP peer (tools/emu/ppp.py), without an emulator: framing,
the modem's command line, LCP and IPCP against a board played by hand.

`make test-emu` runs it against the real image's lwIP (tests/emu/test_emu_ppp.py);
these checks run in `make test`. The expected frames are built here by hand
(byte by byte, with the FCS of RFC 1662's C code), not by the peer's encoder.
"""

from __future__ import annotations

import socket
import struct

from tools.emu.ppp import (
    CONF_ACK,
    CONF_NAK,
    CONF_REQ,
    ECHO_REP,
    ECHO_REQ,
    PROTO_IP,
    PROTO_IPCP,
    PROTO_LCP,
    PROTO_REJ,
    TERM_ACK,
    TERM_REQ,
    FrameReader,
    PppPeer,
    encode_frame,
    fcs16,
)


def rfc1662_fcs(data: bytes) -> int:
    # RFC 1662 appendix C.2, bit by bit (not the peer's table).
    fcs = 0xFFFF
    for b in data:
        fcs ^= b
        for _ in range(8):
            fcs = (fcs >> 1) ^ 0x8408 if fcs & 1 else fcs >> 1
    return fcs ^ 0xFFFF


def board_frame(protocol: int, payload: bytes, compressed: bool = False) -> bytes:
    """A frame as the board's lwIP may send it: ACFC and PFC when `compressed`, ACCM 0."""
    body = (bytes((protocol,)) if compressed and protocol < 0x100 else struct.pack(">H", protocol)) + payload
    if not compressed:
        body = b"\xff\x03" + body
    body += struct.pack("<H", rfc1662_fcs(body))
    out = bytearray(b"~")
    for b in body:
        out += bytes((0x7D, b ^ 0x20)) if b in (0x7E, 0x7D) else bytes((b,))
    return bytes(out + b"~")


def control(code: int, ident: int, data: bytes) -> bytes:
    return struct.pack(">BBH", code, ident, 4 + len(data)) + data


def frames(data: bytes) -> list[tuple[int, bytes]]:
    return FrameReader().feed(data)


def test_fcs_and_framing_round_trip() -> None:
    assert fcs16(b"123456789") ^ 0xFFFF == rfc1662_fcs(b"123456789") == 0x906E  # the CRC-16/X-25 check value
    payload = bytes(range(256))
    wire = encode_frame(PROTO_IP, payload)
    assert all(b >= 0x20 for b in wire[1:-1] if b not in (0x7D,))  # every control character escaped
    reader = FrameReader()
    got = []
    for i in range(len(wire)):  # fed byte by byte
        got += reader.feed(wire[i : i + 1])
    assert got == [(PROTO_IP, payload)]
    assert frames(board_frame(PROTO_IP, b"\x45abc", compressed=True)) == [(PROTO_IP, b"\x45abc")]
    bad = bytearray(wire)
    bad[10] ^= 1
    reader = FrameReader()
    assert reader.feed(bytes(bad)) == [] and reader.bad_fcs == 1


def test_the_modem_answers_commands_then_carries_ppp() -> None:
    peer = PppPeer("10.0.0.1", "10.0.0.2")
    assert peer.feed(b"AT\r") == b"\r\nOK\r\n"
    assert peer.feed(b"ATE0\r\n") == b"\r\nOK\r\n"
    assert peer.feed(b"garbage\r") == b""
    assert peer.feed(b"ATD*99#\r") == b"\r\nCONNECT 115200\r\n"
    assert peer.online and peer.dials == 1
    assert peer.events == ["modem: AT -> OK", "modem: ATE0 -> OK", "modem: ATD*99# -> CONNECT"]


def negotiate(peer: PppPeer) -> None:
    """LCP and IPCP as lwIP runs them, answered by the peer; checked step by step."""
    out = frames(peer.feed(board_frame(PROTO_LCP, control(CONF_REQ, 1, b"\x02\x06\x00\x00\x00\x00\x05\x06abcd"))))
    assert out[0] == (PROTO_LCP, control(CONF_ACK, 1, b"\x02\x06\x00\x00\x00\x00\x05\x06abcd"))
    proto, ours = out[1]
    assert proto == PROTO_LCP and ours[0] == CONF_REQ and ours[4:6] == b"\x05\x06"  # our magic number
    assert frames(peer.feed(board_frame(PROTO_LCP, control(CONF_ACK, ours[1], ours[4:])))) == []
    assert peer.lcp_up and not peer.ip_up
    ask = b"\x03\x06\x00\x00\x00\x00\x81\x06\x00\x00\x00\x00\x83\x06\x00\x00\x00\x00"
    out = frames(peer.feed(board_frame(PROTO_IPCP, control(CONF_REQ, 1, ask), compressed=True)))
    addr, dns = socket.inet_aton("10.0.0.2"), socket.inet_aton("10.0.0.1")
    assert out[0] == (PROTO_IPCP, control(CONF_NAK, 1, b"\x03\x06" + addr + b"\x81\x06" + dns + b"\x83\x06" + dns))
    proto, ours = out[1]
    assert proto == PROTO_IPCP and ours[0] == CONF_REQ and ours[4:] == b"\x03\x06" + dns
    fixed = b"\x03\x06" + addr + b"\x81\x06" + dns + b"\x83\x06" + dns
    out = frames(peer.feed(board_frame(PROTO_IPCP, control(CONF_REQ, 2, fixed))))
    assert out == [(PROTO_IPCP, control(CONF_ACK, 2, fixed))]
    before = peer.ip_up  # (ours not acknowledged yet)
    peer.feed(board_frame(PROTO_IPCP, control(CONF_ACK, ours[1], ours[4:])))
    assert (before, peer.ip_up) == (False, True)
    assert peer.events[-2:] == ["LCP opened", "IPCP opened 10.0.0.2"]


def test_lcp_and_ipcp_give_the_board_its_address_then_ip_flows() -> None:
    peer = PppPeer("10.0.0.1", "10.0.0.2", modem=False)
    assert peer.send_ip(b"\x45early") == b""  # nothing before IPCP is open
    negotiate(peer)
    assert peer.feed(board_frame(PROTO_IP, b"\x45one")) == b""
    assert peer.take_ip() == [b"\x45one"] and peer.take_ip() == []
    assert frames(peer.send_ip(b"\x45two")) == [(PROTO_IP, b"\x45two")]
    # The host's IPv6 (the TUN's router solicitations): not IPv4, never framed
    # as IPv4 (IPV6CP is rejected, below).
    assert peer.send_ip(b"\x60\x00\x00\x00six") == b""
    echo = frames(peer.feed(board_frame(PROTO_LCP, control(ECHO_REQ, 7, b"abcd"))))
    assert echo == [(PROTO_LCP, control(ECHO_REP, 7, peer.magic))]
    rej = frames(peer.feed(board_frame(0x8057, b"\x01\x01\x00\x04")))  # IPV6CP
    assert rej[0][0] == PROTO_LCP and rej[0][1][0] == PROTO_REJ and rej[0][1][4:6] == b"\x80\x57"


def test_a_terminate_from_the_board_ends_the_link_and_the_modem_says_no_carrier() -> None:
    peer = PppPeer("10.0.0.1", "10.0.0.2")
    peer.feed(b"ATD*99#\r")
    negotiate(peer)
    out = peer.feed(board_frame(PROTO_LCP, control(TERM_REQ, 9, b"")))
    assert out.endswith(b"\r\nNO CARRIER\r\n")
    assert frames(out[: out.index(b"\r")]) == [(PROTO_LCP, control(TERM_ACK, 9, b""))]
    assert not peer.online and not peer.ip_up
    assert peer.events[-1] == "link down: terminated by the board"
    # The board's PPP sends more after the carrier went: junk before the next command.
    assert peer.feed(board_frame(PROTO_LCP, control(TERM_ACK, 3, b"")) + b"AT\r") == b"\r\nOK\r\n"
    assert peer.feed(b"ATD*99#\r") == b"\r\nCONNECT 115200\r\n"
    negotiate(peer)  # the redial negotiates from the start
    assert peer.dials == 2


def test_hang_up_cuts_the_link_as_a_network_would() -> None:
    peer = PppPeer("10.0.0.1", "10.0.0.2")
    peer.feed(b"ATD*99#\r")
    negotiate(peer)
    out = peer.hang_up()
    assert frames(out[: out.index(b"\r")])[0][1][0] == TERM_REQ
    assert out.endswith(b"\r\nNO CARRIER\r\n") and not peer.ip_up and not peer.online
    assert peer.hang_up() == b""
