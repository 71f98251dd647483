# The whole broker on the board's flash store: power cut at every write
# and erase of a QoS 1 / QoS 2 scenario (common/store/kvlog.py on the simulated
# NOR flash of tests/core/flashsim.py). After each cut the broker restarts
# from the flash and must deliver every message whose PUBACK/PUBREC the
# publisher received, in order, QoS 2 once; restore never fails. Also
# reports the flash bytes written per delivered message (write
# amplification at the broker level). Runs under CPython and MicroPython.

import unittest

from common.mqtt import consts as C
from common.store.kvlog import KVLog
from common.store.store import Store
from common.store.store_open import open_records
from tests.core.flashsim import FlashSim, PowerCut
from tests.core.harness import Harness

MESSAGES = 40  # QoS alternates 1, 2; enough to wrap the 6-sector log several times


def boot(flash):
    store = Store(KVLog(flash))
    open_records(store)
    return Harness(store=store, max_packet_size=2048)


def scenario(flash, acked):
    """Subscribe persistently, go away, publish MESSAGES; note what was acknowledged."""
    h = boot(flash)
    sub = h.client()
    sub.connect("sub", clean=False)
    sub.subscribe("f/#", qos=2)
    sub.disconnect()
    pub = h.client()
    pub.connect("pub", clean=False)
    for n in range(MESSAGES):
        qos = 1 + n % 2
        pub.publish("f/%d" % qos, b"m%03d" % n, qos=qos, packet_id=n + 1)
        for pkt in pub.take():
            if pkt.ptype in (C.PUBACK, C.PUBREC):
                acked.append(n)
                if pkt.ptype == C.PUBREC:
                    pub.send_raw(bytes([0x62, 2, 0, pkt.packet_id]))  # PUBREL
                    pub.take()
    return h


def collect(flash):
    """Restart from flash; the message numbers the subscriber receives, in order."""
    h = boot(flash)
    sub = h.client()
    sub.connect("sub", clean=False)
    got = []
    for _ in range(4):
        for pkt in sub.take():
            if pkt.ptype == C.PUBLISH:
                got.append(int(pkt.payload[1:]))
                sub.ack(pkt)
            elif pkt.ptype == C.PUBREL:
                sub.send_raw(bytes([0x70, 2, 0, pkt.packet_id]))
    return got


class TestPowerCutEverywhere(unittest.TestCase):
    def flash(self):
        return FlashSim(nblocks=6, block_size=1024)

    def test_every_cut_point_loses_nothing_acknowledged(self):
        clean = self.flash()
        scenario(clean, [])
        total_ops = clean.ops
        self.assertGreater(total_ops, 40)
        cuts = 0
        for k in range(1, total_ops + 1):
            flash = self.flash()
            flash.cut_after(k, seed=k)
            acked = []
            try:
                scenario(flash, acked)
            except PowerCut:
                cuts += 1
            flash.restore_power()
            got = collect(flash)
            missing = [n for n in acked if n not in got]
            self.assertEqual(missing, [], "cut at op %d of %d lost acknowledged %r" % (k, total_ops, missing))
            firsts = []
            for n in got:
                if n not in firsts:
                    firsts.append(n)
            self.assertEqual(firsts, sorted(firsts), "cut at op %d: out of order %r" % (k, got))
            qos2 = [n for n in got if n % 2 == 1]
            self.assertEqual(len(qos2), len(set(qos2)), "cut at op %d: QoS 2 twice %r" % (k, got))
        self.assertEqual(cuts, total_ops)
        print("power cut at %d of %d flash operations" % (cuts, total_ops))

    def test_flash_bytes_per_message(self):
        # Write amplification of the broker's use of the flash log: device
        # bytes per message queued for and delivered to a persistent session.
        flash = self.flash()
        h = scenario(flash, [])
        store_writes = flash.bytes_written
        h.store.backend.close()
        got = collect(flash)
        self.assertEqual(got, list(range(MESSAGES)))
        per_message = flash.bytes_written // MESSAGES
        print("flash bytes written per persisted message: %d (queue) / %d (queue + delivery)" % (store_writes // MESSAGES, per_message))
        # A message is one M and one D record plus their removal: a few
        # hundred bytes with framing, never kilobytes.
        self.assertLess(per_message, 1024)


if __name__ == "__main__":
    unittest.main()
