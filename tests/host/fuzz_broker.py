"""atheris target: arbitrary bytes through the frame reader into a Broker.

    .venv/bin/python tests/host/fuzz_broker.py -runs=1000000 [corpus_dir]
    make fuzz FUZZ_RUNS=1000000          # the long run; make test runs 20,000

Each input is a little program read with atheris' FuzzedDataProvider: open a
connection, send it raw bytes, or a well-formed CONNECT / SUBSCRIBE /
PUBLISH / ack built around fuzzed fields (so the fuzzer reaches the
connected states at once and spends its time past the CONNECT), drop it,
pause its output, let time pass. The broker's output is moved to in-memory
clients after every step (tests/core/harness.py), and decoded by the codec
where the client's protocol level is known: the broker never writes bytes a
client cannot read.

A crash is any exception out of the core, or, at the end of the input
(every connection dropped, every session expired), a pool that is not back
at its baseline (Harness.held()).
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository root

with atheris.instrument_imports(include=["common"]):
    from common.mqtt import consts as C
    from tests.core.harness import FUZZ_SETTINGS, Client, Harness, s16, vbi

EXPIRED = 200  # s after which every session (and will delay) is over
CLIENT_IDS = ("a", "b", "c", "")
MAX_OPS = 48


class FuzzClient(Client):
    """A harness client that decodes the broker's output only when its level is known."""

    def __init__(self, harness):
        Client.__init__(self, harness, 0)
        self.fresh = True  # nothing sent yet: a CONNECT now sets the level

    def receive(self, data):
        if self.level:
            Client.receive(self, data)
            self.inbox = []


def _connect(fdp, level):
    flags = fdp.ConsumeIntInRange(0, 255) & 0xFE  # every flag, valid or not, but the reserved bit
    keep_alive = fdp.ConsumeIntInRange(0, 3)
    body = (s16(b"MQTT") if level >= 4 else s16(b"MQIsdp")) + bytes([level, flags, 0, keep_alive])
    if level == 5:
        body += b"\x05\x11" + fdp.ConsumeIntInRange(0, 100).to_bytes(4, "big")  # Session Expiry
    body += s16(CLIENT_IDS[fdp.ConsumeIntInRange(0, 3)].encode())
    if flags & 0x04:
        if level == 5:
            body += b"\x05\x18" + fdp.ConsumeIntInRange(0, 100).to_bytes(4, "big")  # Will Delay Interval
        body += s16(_topic(fdp)) + s16(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8)))
    if flags & 0x80:
        body += s16(b"u")
    if flags & 0x40:
        body += s16(b"p")
    return b"\x10" + vbi(len(body)) + body


def _topic(fdp):
    return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12)).encode()


def _props(fdp, level):
    if level != 5:
        return b""
    raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8))
    return vbi(len(raw)) + raw


def _packet(fdp, op, level):
    """A SUBSCRIBE, UNSUBSCRIBE, PUBLISH or ack with fuzzed fields."""
    pid = fdp.ConsumeIntInRange(0, 4).to_bytes(2, "big")
    if op == 0:
        body = pid + _props(fdp, level)
        for _ in range(fdp.ConsumeIntInRange(1, 2)):
            body += s16(_topic(fdp)) + bytes([fdp.ConsumeIntInRange(0, 255)])
        return b"\x82" + vbi(len(body)) + body
    if op == 1:
        body = pid + _props(fdp, level) + s16(_topic(fdp))
        return b"\xa2" + vbi(len(body)) + body
    if op == 2:
        flags = fdp.ConsumeIntInRange(0, 15)
        body = s16(_topic(fdp)) + (pid if flags & 6 else b"") + _props(fdp, level)
        body += fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
        return bytes([0x30 | flags]) + vbi(len(body)) + body
    ptype = (C.PUBACK, C.PUBREC, C.PUBREL, C.PUBCOMP)[fdp.ConsumeIntInRange(0, 3)]
    body = pid
    if level == 5 and fdp.ConsumeBool():
        body += bytes([fdp.ConsumeIntInRange(0, 255)]) + _props(fdp, level)
    return bytes([ptype << 4 | (2 if ptype == C.PUBREL else 0)]) + vbi(len(body)) + body


def run(data):
    fdp = atheris.FuzzedDataProvider(data)
    h = Harness(**FUZZ_SETTINGS)
    clients = []
    for _ in range(MAX_OPS):
        if fdp.remaining_bytes() == 0:
            break
        op = fdp.ConsumeIntInRange(0, 9)
        if op == 0 or not clients:
            c = FuzzClient(h)
            if not c.closed:
                h.clients[c.cid] = c
                clients.append(c)
            continue
        c = clients[fdp.ConsumeIntInRange(0, len(clients) - 1)]
        if op == 1:
            level = (3, 4, 5)[fdp.ConsumeIntInRange(0, 2)]
            data = _connect(fdp, level)
            if c.fresh:
                c.level = 4 if level == 3 else level
        elif op == 2:
            data = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
        elif op <= 6:
            data = _packet(fdp, op - 3, c.level or 4)
        elif op == 7:
            c.drop()
            continue
        elif op == 8:
            h.broker.output.set_paused(c.cid, not h.broker.connections.by_id[c.cid].paused)
            h.pump()
            continue
        else:
            h.advance(fdp.ConsumeIntInRange(0, 70))
            continue
        if not c.closed:
            c.fresh = False
            c.send_raw(data)
    for c in clients:
        if not c.closed:
            h.broker.output.set_paused(c.cid, False)
            c.drop()
    for _ in range(3):  # will delays, then session expiries, then what they left
        h.now += EXPIRED
        h.broker.tick(h.now)
        h.pump()
    held = h.held()
    for part in held:
        if held[part]:
            raise AssertionError(f"after every client left and every session expired: {held!r}")


def main():
    atheris.Setup(sys.argv, run)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
