"""The record framing (common/store/kvrecord.py) and the log-structured flash store
(common/store/kvlog.py) on a simulated NOR flash (tests/core/flashsim.py), on
every interpreter: the interface, compaction, wear levelling, limits, write
amplification, and a power cut at every single write/erase of a scenario.
docs/persistence-backends.md quotes the figures these tests print."""

import sys
import unittest

from common.store import kvrecord
from common.store.kvlog import SECTOR_HEADER_SIZE, KVLog
from common.store.kvrecord import ERASED, INVALID, OVERHEAD, StoreFull
from tests.core.flashsim import FlashSim, PowerCut, XorShift
from tests.core.kv_contract import check_items_prefix, check_put_get_overwrite_delete, items


def value_for(i, size):
    """A value that names its writer, so a stale one is recognisable."""
    stamp = b"v%d:" % i
    return (stamp * (size // len(stamp) + 1))[:size]


def churn(kv, model, n, nkeys, vsize, seed, delete_every=5):
    """n operations over nkeys keys: mostly puts of vsize-byte values, every
    `delete_every`-th one (on average) a delete. Keeps `model` in step."""
    rng = XorShift(seed)
    for i in range(n):
        key = b"key/%03d" % rng.below(nkeys)
        if rng.below(delete_every) == 0:
            kv.delete(key)
            model.pop(key, None)
        else:
            value = value_for(i, vsize)
            kv.put(key, value)
            model[key] = value


class _SignedCrc32:
    """Stands in sys.modules for a binascii whose crc32 fails the standard
    check (a port that returns it signed)."""

    def crc32(self, data, crc=0):
        return -1


def compat_without_binascii_crc32():
    """A fresh common.compat imported as on a port whose binascii.crc32 is
    wrong; the loaded one and binascii are left as they were."""
    package = sys.modules["common"]
    saved = {name: sys.modules.get(name) for name in ("binascii", "common.compat")}
    sys.modules["binascii"] = _SignedCrc32()
    del sys.modules["common.compat"]
    try:
        return __import__("common.compat", None, None, ["crc32"])
    finally:
        for name in saved:
            if saved[name] is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = saved[name]
        package.compat = saved["common.compat"]


class TestRecord(unittest.TestCase):
    def test_round_trip(self):
        buf = bytearray(64)
        end = kvrecord.encode_into(buf, 3, b"k1", b"hello")
        self.assertEqual(end, 3 + OVERHEAD + 7)
        rec = kvrecord.decode(buf, 3, len(buf))
        flags, ks, ke, ve, nxt = rec
        self.assertEqual(bytes(buf[ks:ke]), b"k1")
        self.assertEqual(bytes(buf[ke:ve]), b"hello")
        self.assertEqual(nxt, end)
        self.assertFalse(kvrecord.is_tombstone(flags))

    def test_tombstone(self):
        rec = kvrecord.encode(b"gone", b"ignored", tombstone=True)
        self.assertEqual(len(rec), OVERHEAD + 4)
        flags, _ks, ke, ve, _nxt = kvrecord.decode(rec, 0, len(rec))
        self.assertTrue(kvrecord.is_tombstone(flags))
        self.assertEqual(ke, ve)

    def test_layout_is_documented_one(self):
        rec = bytes(kvrecord.encode(b"k", b"vv"))
        # magic, flags, key length LE16, value length LE32, key, value, CRC LE32
        self.assertEqual(rec[:11], b"\xa5\x00\x01\x00\x02\x00\x00\x00kvv")
        crc = kvrecord.crc32(rec[:11])
        self.assertEqual(rec[11:], bytes([crc & 0xFF, (crc >> 8) & 0xFF, (crc >> 16) & 0xFF, crc >> 24]))

    def test_every_torn_prefix_is_invalid(self):
        rec = bytes(kvrecord.encode(b"key", b"some value"))
        for cut in range(len(rec)):
            for fill in (0xFF, 0x00):
                torn = bytearray(rec[:cut] + bytes([fill]) * (len(rec) - cut))
                got = kvrecord.decode(torn, 0, len(torn))
                if cut == 0 and fill == 0xFF:
                    self.assertEqual(got, ERASED)
                else:
                    self.assertEqual(got, INVALID, "prefix %d fill %d" % (cut, fill))

    def test_every_bit_flip_is_invalid(self):
        rec = bytes(kvrecord.encode(b"key", b"value"))
        for i in range(len(rec)):
            for bit in (0x01, 0x80):
                bad = bytearray(rec)
                bad[i] ^= bit
                self.assertEqual(kvrecord.decode(bad, 0, len(bad)), INVALID)

    def test_short_buffer_and_reserved_flags(self):
        rec = bytearray(kvrecord.encode(b"k", b"v"))
        self.assertEqual(kvrecord.decode(rec, 0, len(rec) - 1), INVALID)
        self.assertEqual(kvrecord.decode(rec, 0, 5), INVALID)
        rec[1] = 0x02
        self.assertEqual(kvrecord.decode(rec, 0, len(rec)), INVALID)

    def test_crc_fallback_matches(self):
        # compat's own crc32, as a port without a correct binascii.crc32 gets it.
        fallback = compat_without_binascii_crc32().crc32
        self.assertIsNot(fallback, kvrecord.crc32)
        for data in (b"", b"123456789", bytes(range(256)) * 3):
            self.assertEqual(fallback(data), kvrecord.crc32(data))
        self.assertEqual(fallback(b"123456789"), 0xCBF43926)
        part = fallback(b"1234")
        self.assertEqual(fallback(b"56789", part), 0xCBF43926)

    def test_store_full_is_oserror(self):
        e = StoreFull("x")
        self.assertIsInstance(e, OSError)
        self.assertEqual(e.args[0], 28)


class TestKVLogBasics(unittest.TestCase):
    def setUp(self):
        self.dev = FlashSim(8, 1024)
        self.kv = KVLog(self.dev)

    def test_put_get_overwrite_delete(self):
        check_put_get_overwrite_delete(self, self.kv)

    def test_items_prefix(self):
        check_items_prefix(self, self.kv)

    def test_reopen_keeps_values_and_tombstones(self):
        kv = self.kv
        kv.put(b"x", b"old")
        kv.put(b"y", b"keep")
        kv.put(b"x", b"new")
        kv.put(b"z", b"doomed")
        kv.delete(b"z")
        kv.close()
        kv2 = KVLog(self.dev)
        self.assertEqual(kv2.get(b"x"), b"new")
        self.assertEqual(kv2.get(b"y"), b"keep")
        self.assertIsNone(kv2.get(b"z"))
        self.assertEqual(kv2.skipped, 0)
        kv2.put(b"z", b"back")
        kv3 = KVLog(self.dev)
        self.assertEqual(kv3.get(b"z"), b"back")

    def test_counters(self):
        kv = self.kv
        kv.put(b"key", b"value")
        kv.delete(b"key")
        self.assertEqual(kv.user_bytes, 3 + 5 + 3)
        # two records plus the header of the first sector opened
        self.assertEqual(kv.device_bytes, (OVERHEAD + 8) + (OVERHEAD + 3) + SECTOR_HEADER_SIZE)

    def test_record_size_limit(self):
        kv = self.kv
        limit = kv.max_record
        self.assertEqual(limit, 1024 - SECTOR_HEADER_SIZE)
        big = b"x" * (limit - OVERHEAD - 3)
        kv.put(b"big", big)  # exactly the limit fits
        with self.assertRaises(ValueError):
            kv.put(b"big", big + b"y")
        self.assertEqual(kv.get(b"big"), big)
        for i in range(12):  # a sector of its own each time, through compaction
            kv.put(b"big", value_for(i, len(big)))
        kv2 = KVLog(self.dev)
        self.assertEqual(kv2.get(b"big"), value_for(11, len(big)))

    def test_store_full_when_live_data_cannot_fit(self):
        kv = self.kv
        value = b"v" * 200
        stored = []
        try:
            for i in range(100):
                kv.put(b"k%03d" % i, value)
                stored.append(b"k%03d" % i)
        except StoreFull:
            pass
        self.assertLess(len(stored), 100)
        self.assertGreater(len(stored), 10)  # 6 usable sectors of 1004 bytes hold 4 each
        with self.assertRaises(StoreFull):
            kv.put(b"one more", value)
        # Nothing was lost; deleting makes room again.
        for k in stored:
            self.assertEqual(kv.get(k), value)
        kv.delete(stored[0])
        kv.delete(stored[1])
        kv.put(b"one more", value)
        kv2 = KVLog(self.dev)
        self.assertEqual(len(items(kv2)), len(stored) - 1)
        self.assertEqual(kv2.get(b"one more"), value)

    def test_too_small_device_refused(self):
        with self.assertRaises(ValueError):
            KVLog(FlashSim(3, 1024))

    def test_page_aligned_writes(self):
        # rp2.Flash programs whole 256-byte pages: every write is widened.
        dev = FlashSim(8, 4096, prog_size=256)
        kv = KVLog(dev, prog_size=256)
        model = {}
        churn(kv, model, 600, 20, 150, seed=7)
        kv2 = KVLog(dev, prog_size=256)
        self.assertEqual(dict(items(kv2)), model)

    def test_damaged_record_skipped_on_mount(self):
        kv = self.kv
        kv.put(b"a", b"first")
        kv.put(b"a", b"second")
        sector, off, size = kv._index[b"a"]
        # Flip a bit of the newest record's value (bit rot: 1 -> 0 only on NOR).
        pos = sector * 1024 + off + size - 6
        self.dev.mem[pos] &= 0xFE if self.dev.mem[pos] & 1 else 0xFD
        kv2 = KVLog(self.dev)
        self.assertEqual(kv2.skipped, 1)
        self.assertEqual(kv2.get(b"a"), b"first")
        kv2.put(b"b", b"after")  # goes to a fresh sector
        kv3 = KVLog(self.dev)
        self.assertEqual(kv3.get(b"b"), b"after")
        self.assertEqual(kv3.get(b"a"), b"first")


class TestKVLogCompaction(unittest.TestCase):
    def test_churn_keeps_every_live_key(self):
        dev = FlashSim(8, 1024)
        kv = KVLog(dev)
        model = {}
        for round_ in range(4):
            churn(kv, model, 400, 24, 40, seed=round_ + 1)
            for k in model:
                self.assertEqual(kv.get(k), model[k])
            kv = KVLog(dev)  # reopen between rounds
            self.assertEqual(dict(items(kv)), model)
        self.assertGreater(sum(dev.erase_counts), 20)

    def test_wear_is_spread_evenly(self):
        dev = FlashSim(16, 1024)
        kv = KVLog(dev)
        model = {}
        churn(kv, model, 3000, 16, 60, seed=3)
        kv = KVLog(dev)  # the counts survive a reboot
        counts = kv.erase_counts()
        self.assertEqual(counts, dev.erase_counts)
        self.assertGreater(min(counts), 5)
        self.assertLessEqual(max(counts) - min(counts), 1)
        self.assertEqual(dict(items(kv)), model)

    def test_write_amplification(self):
        # The figure in docs/persistence-backends.md: 10,000 put/delete of
        # 100-byte values over 64 live keys on a 16-sector device.
        n = 10000
        dev = FlashSim(16, 4096)
        kv = KVLog(dev)
        model = {}
        churn(kv, model, n, 64, 100, seed=11, delete_every=10)
        wa = kv.device_bytes / kv.user_bytes
        print(
            "kvlog write amplification: %d ops, user %d B, device %d B, WA %.3f, erases %d, compactions %d"
            % (n, kv.user_bytes, kv.device_bytes, wa, kv.erases, kv.compactions)
        )
        self.assertLess(wa, 1.6)
        counts = kv.erase_counts()
        self.assertLessEqual(max(counts) - min(counts), 1)
        self.assertEqual(dict(items(KVLog(dev))), model)


class TestKVLogTornErase(unittest.TestCase):
    def test_torn_erase_never_resurrects_a_deleted_value(self):
        # A value and its tombstone in one sector; compaction drops both (the
        # tombstone has nothing older left to hide) and erases the sector. An
        # erase torn so that the header and the value survive but the
        # tombstone does not must not bring the value back.
        dev = FlashSim(6, 512)
        kv = KVLog(dev)
        kv.put(b"gone", b"must stay deleted")
        kv.delete(b"gone")
        sector = kv._log[-1]
        tomb_off = kv._head_off - (OVERHEAD + 4)
        dev.tear_erase_of(sector, tomb_off)
        model = {}
        with self.assertRaises(PowerCut):
            churn(kv, model, 1000, 6, 30, seed=5, delete_every=1000)
        dev.restore_power()
        kv2 = KVLog(dev)
        self.assertIsNone(kv2.get(b"gone"))
        for key in model:
            self.assertEqual(kv2.get(key), model[key])


# -- power cut at every write and erase ---------------------------------------


def scenario_ops():
    """A deterministic mix of puts and deletes that fills a 6 x 512-byte
    device several times over, so compactions run inside the scenario."""
    rng = XorShift(42)
    ops = []
    for i in range(130):
        if i % 40 == 5:
            # A key put and deleted at once, then left alone: its value and
            # tombstone share a sector, which compaction will drop whole.
            gone = b"gone%d" % (i // 40)
            ops.append((gone, value_for(i, 20)))
            ops.append((gone, None))
        key = b"k%d" % rng.below(7)
        if rng.below(6) == 0:
            ops.append((key, None))
        else:
            ops.append((key, value_for(i, 8 + rng.below(40))))
    return ops


KEYS = [b"k%d" % i for i in range(7)] + [b"gone%d" % i for i in range(4)]


def session(dev, ops, model, cut=0, seed=1):
    """Mount, arm a power cut at the cut-th device operation (0: none), run
    ops, keeping `model` equal to what completed. Returns the index of the op
    the power failed in (len(ops) if it never did)."""
    kv = KVLog(dev)
    if cut:
        dev.cut_after(cut, seed=seed)
    for i in range(len(ops)):
        key, value = ops[i]
        try:
            if value is None:
                kv.delete(key)
            else:
                kv.put(key, value)
        except PowerCut:
            dev.restore_power()
            return i
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    return len(ops)


class TestKVLogPowerCuts(unittest.TestCase):
    NBLOCKS = 6
    BLOCK = 512

    def verify(self, dev, ops, model, cut_op, where):
        """Every key holds its last completed value, or the new value of the
        interrupted op. Brings `model` in line with what the store holds."""
        kv = KVLog(dev)  # never fails
        for key in KEYS:
            allowed = [model.get(key)]
            if cut_op < len(ops) and ops[cut_op][0] == key:
                allowed.append(ops[cut_op][1])  # the interrupted op: old or new
            got = kv.get(key)
            self.assertIn(got, allowed, "%s: key %r" % (where, key))
            if got is None:
                model.pop(key, None)
            else:
                model[key] = got
        return kv

    def check_still_works(self, dev, where):
        kv = KVLog(dev)
        for key in KEYS:
            kv.put(key, key + b" after the cut")
        kv.delete(KEYS[0])
        kv2 = KVLog(dev)
        for key in KEYS:
            expect = None if key == KEYS[0] else key + b" after the cut"
            self.assertEqual(kv2.get(key), expect, where)

    def test_power_cut_at_every_write_and_erase(self):
        ops = scenario_ops()
        # The uncut run: how many device operations the scenario makes.
        ref = FlashSim(self.NBLOCKS, self.BLOCK)
        self.assertEqual(session(ref, ops, {}), len(ops))
        total = ref.ops
        kv = KVLog(ref)
        self.assertGreater(sum(ref.erase_counts), self.NBLOCKS * 2)  # compaction ran, often
        covered = 0
        torn_seen = 0
        for k in range(1, total + 1):
            dev = FlashSim(self.NBLOCKS, self.BLOCK)
            model = {}
            cut_op = session(dev, ops, model, cut=k, seed=k)
            self.assertLess(cut_op, len(ops), "cut %d did not happen" % k)
            covered += 1
            where = "cut at device op %d/%d" % (k, total)
            kv = self.verify(dev, ops, model, cut_op, where)
            torn_seen += kv.skipped > 0
            self.check_still_works(dev, where)
        print(
            "kvlog power cuts: %d of %d device operations covered (%d left a torn record)" % (covered, total, torn_seen)
        )
        self.assertEqual(covered, total)
        self.assertGreater(torn_seen, 0)

    def test_two_power_cuts_in_a_row(self):
        # A cut, then another one soon after the reboot (during the recovery
        # compaction, often), at a sample of points.
        ops = scenario_ops()
        ref = FlashSim(self.NBLOCKS, self.BLOCK)
        session(ref, ops, {})
        total = ref.ops
        pairs = 0
        for k in range(2, total + 1, 11):
            for second in (1, 3, 7):
                dev = FlashSim(self.NBLOCKS, self.BLOCK)
                model = {}
                cut_op = session(dev, ops, model, cut=k, seed=k)
                self.verify(dev, ops, model, cut_op, "first cut %d" % k)
                rest = ops[cut_op:] + ops
                cut2 = session(dev, rest, model, cut=second, seed=k * 31 + second)
                where = "cuts at %d then %d" % (k, second)
                self.verify(dev, rest, model, cut2, where)
                self.check_still_works(dev, where)
                pairs += 1
        print("kvlog double power cuts: %d pairs" % pairs)
