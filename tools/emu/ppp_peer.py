"""The host's end of the emulated board's UART: a PPP peer (tools/emu/ppp.py)
whose IP packets go to a TUN device, run inside a network namespace.

    ip netns exec NS python -m tools.emu.ppp_peer --socket /tmp/uart0.sock \\
        [--local 10.0.0.1 --remote 10.0.0.2] [--tun siskin0] [--no-modem]

It listens on the Unix socket that tools/emu/run.js --uart0 connects to,
makes the TUN device (/dev/net/tun, IFF_TUN without packet information),
gives it `local` with `remote` as its point-to-point peer and brings it up
(iproute2), so that host processes in the namespace reach the board at
`remote`. Each event of the peer is printed on a line of its own ("ready",
"modem: ATD*99# -> CONNECT", "LCP opened", "IPCP opened 10.0.0.2", "link
down: ..."), which the tests wait for. SIGUSR1 cuts the link as a network
would (LCP Terminate-Request, then NO CARRIER); SIGTERM ends the peer.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys

from tools.emu.ppp import PppPeer

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def describe(packet: bytes) -> str:
    """One line for an IPv4 packet (--trace): addresses, and a TCP segment's ports and flags."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return f"not IPv4 ({len(packet)} B)"
    src, dst = socket.inet_ntoa(packet[12:16]), socket.inet_ntoa(packet[16:20])
    head = (packet[0] & 15) * 4
    if packet[9] == 6 and len(packet) >= head + 14:
        sport, dport = struct.unpack(">HH", packet[head : head + 4])
        flags = "".join(c for c, bit in zip("FSRPAU", (1, 2, 4, 8, 16, 32)) if packet[head + 13] & bit)
        return f"{src}:{sport} > {dst}:{dport} {flags} {len(packet)} B"
    return f"{src} > {dst} proto {packet[9]} {len(packet)} B"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/emu/ppp_peer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="the Unix socket run.js --uart0 connects to")
    ap.add_argument("--local", default="10.0.0.1")
    ap.add_argument("--remote", default="10.0.0.2", help="the board's address")
    ap.add_argument("--tun", default="siskin0")
    ap.add_argument("--no-modem", action="store_true", help="PPP from the first byte (no AT commands)")
    ap.add_argument("--trace", action="store_true", help="a line per IP packet, each way")
    args = ap.parse_args(argv)
    tun = open_tun(args.tun)
    for cmd in (
        ["ip", "link", "set", "lo", "up"],
        ["ip", "addr", "add", args.local, "peer", args.remote, "dev", args.tun],
        ["ip", "link", "set", args.tun, "up"],
    ):
        subprocess.run(cmd, check=True)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.socket)
    listener.listen(1)
    peer = PppPeer(args.local, args.remote, modem=not args.no_modem)
    wanted = {"hang_up": False, "stop": False}
    signal.signal(signal.SIGUSR1, lambda *_: wanted.__setitem__("hang_up", True))
    signal.signal(signal.SIGTERM, lambda *_: wanted.__setitem__("stop", True))
    print("ready", flush=True)
    conn, _ = listener.accept()
    conn.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(conn, selectors.EVENT_READ, "uart")
    sel.register(tun, selectors.EVENT_READ, "tun")
    shown = 0
    while not wanted["stop"]:
        out = b""
        if wanted["hang_up"]:
            wanted["hang_up"] = False
            out += peer.hang_up()
        for key, _ in sel.select(timeout=0.2):
            if key.data == "uart":
                try:
                    data = conn.recv(65536)
                except ConnectionResetError:  # (the emulator ended first)
                    data = b""
                if not data:
                    print("board gone", flush=True)
                    return 0
                out += peer.feed(data)
                for pkt in peer.take_ip():
                    if args.trace:
                        print("board> " + describe(pkt), flush=True)
                    os.write(tun, pkt)
            else:
                try:
                    while True:
                        pkt = os.read(tun, 65536)
                        frame = peer.send_ip(pkt)
                        if args.trace:
                            print("board< " + describe(pkt) + ("" if frame else " (dropped)"), flush=True)
                        out += frame
                except BlockingIOError:
                    pass
        if out:
            conn.setblocking(True)
            conn.sendall(out)
            conn.setblocking(False)
        while shown < len(peer.events):
            print(peer.events[shown], flush=True)
            shown += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
