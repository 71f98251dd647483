"""The append-only file store (common/store/filelog.py) on an in-memory file system
with power cuts (tests/core/memfs.py), on every interpreter: the interface,
reopen, torn tails, compaction through path + ".compact", limits, write
amplification, and a power cut at every file-system operation of a scenario.
tests/host/test_filelog_posix.py runs it on real files."""

import unittest

from common.store import filelog_open
from common.store.filelog import COMPACT_SUFFIX, CORRUPT_SUFFIX, FILE_HEADER_SIZE, FileLog
from common.store.filelog_open import open_file_log
from common.store.kvrecord import OVERHEAD, StoreFull
from tests.core.flashsim import PowerCut, XorShift
from tests.core.kv_contract import check_items_prefix, check_put_get_overwrite_delete, items
from tests.core.memfs import MemFS
from tests.core.test_kvlog import churn, value_for

PATH = "/data/siskin.log"


class TestFileLogBasics(unittest.TestCase):
    def setUp(self):
        self.fs = MemFS()
        self.kv = open_file_log(self.fs, PATH)

    def test_put_get_overwrite_delete(self):
        check_put_get_overwrite_delete(self, self.kv)

    def test_items_prefix(self):
        check_items_prefix(self, self.kv)

    def test_presized_index_takes_its_keys_without_a_new_table(self):
        # keys=N (a board's start-up): N keys go into the RAM index with the
        # heap locked, i.e. without the one big allocation of a dict's
        # growth that a fragmented board heap may not have; without keys=
        # the same keys need it.
        try:
            from micropython import heap_lock, heap_unlock
        except ImportError:
            self.skipTest("micropython.heap_lock: MicroPython only (tests/host/test_micropython.py)")
        keys = [b"k%03d" % i for i in range(100)]
        loc = (FILE_HEADER_SIZE, 20)
        for kv, grows in ((open_file_log(MemFS(), PATH, keys=100), False), (open_file_log(MemFS(), PATH), True)):
            index = kv.index
            heap_lock()
            try:
                for key in keys:
                    index[key] = loc
                grew = False
            except MemoryError:
                grew = True
            finally:
                heap_unlock()
            self.assertEqual(grew, grows)
        kv = open_file_log(MemFS(), PATH, keys=100)
        self.assertEqual(len(kv), 0)  # the keys that made the room are gone
        check_put_get_overwrite_delete(self, kv)

    def test_reopen_after_sync(self):
        kv = self.kv
        kv.put(b"x", b"old")
        kv.put(b"x", b"new")
        kv.put(b"z", b"doomed")
        kv.delete(b"z")
        kv.put(b"big", b"B" * 5000)  # beyond the one-buffer path
        kv.sync()
        kv2 = open_file_log(self.fs, PATH)
        self.assertEqual(kv2.get(b"x"), b"new")
        self.assertIsNone(kv2.get(b"z"))
        self.assertEqual(kv2.get(b"big"), b"B" * 5000)
        self.assertEqual(kv2.skipped, 0)
        kv2.close()
        self.assertEqual(open_file_log(self.fs, PATH).get(b"x"), b"new")

    def test_counters(self):
        kv = self.kv
        kv.put(b"key", b"value")
        kv.delete(b"key")
        self.assertEqual(kv.user_bytes, 3 + 5 + 3)
        self.assertEqual(kv.device_bytes, FILE_HEADER_SIZE + (OVERHEAD + 8) + (OVERHEAD + 3))

    def test_torn_tail_is_cut_off_and_later_appends_readable(self):
        kv = self.kv
        kv.put(b"a", b"kept")
        kv.sync()
        size = self.fs.size(PATH)
        kv.put(b"b", b"torn record")
        # Keep only part of the last record, as a power cut may.
        self.fs.truncate(PATH, size + 7)
        kv2 = open_file_log(self.fs, PATH)
        self.assertEqual(kv2.skipped, 0)
        self.assertEqual(kv2.get(b"a"), b"kept")
        self.assertIsNone(kv2.get(b"b"))
        self.assertEqual(self.fs.size(PATH), size)  # rewritten without the tail
        kv2.put(b"c", b"after")
        kv2.sync()
        kv3 = open_file_log(self.fs, PATH)
        self.assertEqual(kv3.get(b"c"), b"after")
        self.assertEqual(kv3.get(b"a"), b"kept")

    def test_zero_filled_tail(self):
        kv = self.kv
        kv.put(b"a", b"kept")
        kv.sync()
        self.fs.names[PATH].data.extend(bytes(40))  # length grew, data never came
        kv2 = open_file_log(self.fs, PATH)
        self.assertEqual(items(kv2), [(b"a", b"kept")])
        kv2.put(b"b", b"next")
        kv2.sync()
        self.assertEqual(open_file_log(self.fs, PATH).get(b"b"), b"next")

    def test_damaged_record_in_the_middle_is_skipped(self):
        kv = self.kv
        kv.put(b"a", b"one")
        kv.sync()
        start = self.fs.size(PATH)
        kv.put(b"b", b"two")
        kv.put(b"c", b"three")
        kv.sync()
        self.fs.corrupt(PATH, start + OVERHEAD)  # inside b's value
        kv2 = open_file_log(self.fs, PATH)
        self.assertEqual(kv2.skipped, 1)
        self.assertEqual(kv2.get(b"a"), b"one")
        self.assertIsNone(kv2.get(b"b"))
        self.assertEqual(kv2.get(b"c"), b"three")
        kv2.put(b"d", b"four")
        kv2.sync()
        kv3 = open_file_log(self.fs, PATH)
        self.assertEqual(kv3.skipped, 0)
        self.assertEqual(kv3.get(b"d"), b"four")

    def test_monitor_hears_the_scan(self):
        # The shell says what long work goes on (cpython_host/operations/store_monitor.py):
        # the open's reading of the log, in bytes, at its start, every
        # SCAN_STEP bytes and at its end. (Compactions: the host's own
        # FileLog, tests/host/test_store_monitor.py.)
        # A step of 4 KiB instead of 1 MiB: the log fits a MicroPython heap.
        step = filelog_open.SCAN_STEP
        filelog_open.SCAN_STEP = SCAN_STEP = 4096
        self.addCleanup(setattr, filelog_open, "SCAN_STEP", step)
        value = b"v" * 100
        count = 3 * SCAN_STEP // (OVERHEAD + 4 + len(value)) + 10
        writer = open_file_log(self.fs, PATH, compact_min=1 << 30)  # a log three times its live bytes
        for i in range(count):
            writer.put(b"k%03d" % (i % 40), value)
        writer.close()
        calls = []

        class Monitor:
            def progress(self, phase, done, total):
                calls.append((phase, done, total))

        kv = FileLog(self.fs, PATH)
        kv.monitor = Monitor()  # before the open, to hear of its scan
        filelog_open.open_log(kv)
        size = kv.file_size
        self.assertTrue(size > 3 * SCAN_STEP)
        scan = [c for c in calls if c[0] == "scan"]
        self.assertEqual(scan[0], ("scan", 0, size))
        self.assertEqual(scan[-1], ("scan", size, size))
        self.assertTrue(all(total == size for _phase, _done, total in scan))
        done = [d for _phase, d, _total in scan[1:-1]]  # every SCAN_STEP bytes, at a record's start
        self.assertTrue(len(done) >= 2 and done[0] >= SCAN_STEP and done[-1] < size)
        for i in range(1, len(done)):
            self.assertTrue(SCAN_STEP <= done[i] - done[i - 1] < SCAN_STEP + OVERHEAD + 4 + len(value))

    def test_leftover_compact_file_removed(self):
        self.kv.put(b"a", b"1")
        self.kv.sync()
        f = self.fs.open(PATH + COMPACT_SUFFIX, "wb")
        f.write(b"half a compaction")
        f.close()
        kv2 = open_file_log(self.fs, PATH)
        self.assertFalse(self.fs.exists(PATH + COMPACT_SUFFIX))
        self.assertEqual(kv2.get(b"a"), b"1")

    def test_foreign_file_kept_aside(self):
        f = self.fs.open("/data/other", "wb")
        f.write(b"this is not a siskin log at all")
        f.close()
        kv = open_file_log(self.fs, "/data/other")
        self.assertEqual(kv.skipped, 1)
        self.assertTrue(self.fs.exists("/data/other" + CORRUPT_SUFFIX))
        kv.put(b"a", b"1")
        kv.sync()
        self.assertEqual(open_file_log(self.fs, "/data/other").get(b"a"), b"1")

    def test_compaction_under_churn_keeps_every_live_key(self):
        kv = open_file_log(self.fs, "/data/churn.log", compact_min=2048)
        model = {}
        for round_ in range(3):
            churn(kv, model, 500, 20, 50, seed=round_ + 1)
            for k in model:
                self.assertEqual(kv.get(k), model[k])
            kv.sync()
            kv = open_file_log(self.fs, "/data/churn.log", compact_min=2048)
            self.assertEqual(dict(items(kv)), model)
        self.assertLess(self.fs.size("/data/churn.log"), 2 * (FILE_HEADER_SIZE + kv.live_bytes) + 2048)

    def test_store_full_with_max_bytes(self):
        kv = open_file_log(self.fs, "/data/small.log", compact_min=512, max_bytes=2048)
        value = b"v" * 100
        stored = []
        with self.assertRaises(StoreFull):
            for i in range(100):
                kv.put(b"k%02d" % i, value)
                stored.append(b"k%02d" % i)
        self.assertGreater(len(stored), 10)
        with self.assertRaises(StoreFull):  # old and new must fit at once
            kv.put(stored[0], value_for(0, 100))
        self.assertEqual(kv.get(stored[0]), value)
        kv.delete(stored.pop())
        for i in range(200):  # overwrites fit again, through compaction
            kv.put(stored[i % len(stored)], value_for(i, 100))
        kv.delete(stored[0])
        kv.put(b"new", value)
        kv.sync()
        self.assertLessEqual(self.fs.size("/data/small.log"), 2048)
        kv2 = open_file_log(self.fs, "/data/small.log", max_bytes=2048)
        self.assertEqual(kv2.get(b"new"), value)
        self.assertEqual(len(kv2), len(stored))

    def test_write_amplification(self):
        kv = open_file_log(self.fs, "/data/wa.log", compact_min=65536)
        model = {}
        churn(kv, model, 10000, 64, 100, seed=11, delete_every=10)
        kv.sync()
        wa = kv.device_bytes / kv.user_bytes
        print(
            "filelog write amplification: 10000 ops, user %d B, device %d B, WA %.3f, compactions %d"
            % (kv.user_bytes, kv.device_bytes, wa, kv.compactions)
        )
        self.assertLess(wa, 1.5)
        self.assertEqual(dict(items(open_file_log(self.fs, "/data/wa.log"))), model)


class TestFileLogRoom(unittest.TestCase):
    """Room: zeros written ahead of the log, records written over them."""

    def setUp(self):
        self.fs = MemFS()

    def test_room_is_kept_ahead_and_reopens_clean(self):
        kv = open_file_log(self.fs, PATH, room=100)
        self.assertEqual(self.fs.size(PATH), FILE_HEADER_SIZE + 100)
        kv.put(b"a", b"1" * 50)
        self.assertEqual(self.fs.size(PATH), FILE_HEADER_SIZE + 100)  # written over the zeros
        kv.put(b"b", b"2" * 50)  # past the room: 100 more zeros after it
        end = kv.file_size
        self.assertEqual(self.fs.size(PATH), end + 100)
        kv.delete(b"a")
        kv.sync()
        kv2 = open_file_log(self.fs, PATH, room=100)
        self.assertEqual(items(kv2), [(b"b", b"2" * 50)])
        self.assertEqual((kv2.torn, kv2.skipped, kv2.notes, kv2.compactions), (0, 0, [], 0))
        self.assertEqual(kv2.file_size, kv.file_size)  # appends go on where the log ended
        kv2.put(b"c", b"3")
        kv2.sync()
        # Without room, the zeros are dropped by a rewrite, silently.
        kv3 = open_file_log(self.fs, PATH)
        self.assertEqual(sorted(items(kv3)), [(b"b", b"2" * 50), (b"c", b"3")])
        self.assertEqual((kv3.torn, kv3.notes), (0, []))
        self.assertEqual(self.fs.size(PATH), kv3.file_size)

    def test_torn_record_in_the_room_is_dropped(self):
        kv = open_file_log(self.fs, PATH, room=200)
        kv.put(b"a", b"kept")
        kv.sync()
        start = kv.file_size
        kv.put(b"b", b"torn record")
        kv.sync()
        data = self.fs.names[PATH].data
        for i in range(start + 9, kv.file_size):  # a prefix written, then the old zeros
            data[i] = 0
        kv2 = open_file_log(self.fs, PATH, room=200)
        self.assertEqual(items(kv2), [(b"a", b"kept")])
        self.assertEqual(kv2.torn, 9)
        self.assertEqual(len(kv2.notes), 1)
        self.assertEqual(self.fs.size(PATH), start + 200)  # rewritten, with its room
        kv2.put(b"c", b"after")
        kv2.sync()
        self.assertEqual(open_file_log(self.fs, PATH, room=200).get(b"c"), b"after")


# -- power cut at every file-system operation ----------------------------------

KEYS = [b"k%d" % i for i in range(6)]


def scenario_ops():
    """Puts, deletes and syncs; small enough compaction thresholds that the
    scenario compacts several times."""
    rng = XorShift(7)
    ops = []
    for i in range(110):
        r = rng.below(8)
        key = KEYS[rng.below(len(KEYS))]
        if r == 0:
            ops.append(("sync", None, None))
        elif r == 1:
            ops.append(("delete", key, None))
        else:
            ops.append(("put", key, value_for(i, 10 + rng.below(60))))
    ops.append(("sync", None, None))
    return ops


class GatheringLog(FileLog):
    """A FileLog that holds more records back for one write (the host's
    gathers 32 KB: cpython_host/runtime/storage.py)."""

    batch = 4096


def open_log(fs, room=0, cls=FileLog):
    log = cls(fs, PATH, 600, 2, 0, 0, room)
    filelog_open.open_log(log)
    return log


class Expect:
    """Per key: the value at the last completed sync, and every value put
    (None: deleted) since. After a cut, a key must hold one of them."""

    def __init__(self):
        self.synced = {}
        self.since = {}

    def apply(self, op, key, value):
        if op == "sync":
            for k in self.since:
                self.synced[k] = self.since[k][-1]
            self.since = {}
        else:
            self.since.setdefault(key, []).append(value)

    def allowed(self, key):
        return [self.synced.get(key)] + self.since.get(key, [])

    def reset(self, state):
        self.synced = dict(state)
        self.since = {}


def session(fs, ops, expect, cut=0, seed=1, room=0, cls=FileLog):
    """Open, arm a cut at the cut-th fs operation, run ops. Returns True if
    the power failed. An interrupted op counts as begun: its value is allowed."""
    kv = None
    if cut:
        fs.cut_after(cut, seed=seed)
    try:
        kv = open_log(fs, room, cls)
        for op, key, value in ops:
            if op != "sync":
                expect.apply(op, key, value)  # may land even if the op is cut
            if op == "put":
                kv.put(key, value)
            elif op == "delete":
                kv.delete(key)
            else:
                kv.sync()
                expect.apply(op, key, value)
    except PowerCut:
        fs.restore_power()
        return True
    kv.close()
    return False


class TestFileLogPowerCuts(unittest.TestCase):
    room = 0
    cls = FileLog

    def verify(self, fs, expect, where):
        kv = open_log(fs, self.room, self.cls)  # never fails
        state = {}
        for key in KEYS:
            got = kv.get(key)
            self.assertIn(got, expect.allowed(key), "%s: key %r" % (where, key))
            state[key] = got
        expect.reset(state)
        return kv

    def check_still_works(self, fs, where):
        kv = open_log(fs, self.room, self.cls)
        for key in KEYS:
            kv.put(key, key + b" after the cut")
        kv.delete(KEYS[0])
        kv.sync()
        kv2 = open_log(fs, self.room, self.cls)
        for key in KEYS:
            expect = None if key == KEYS[0] else key + b" after the cut"
            self.assertEqual(kv2.get(key), expect, where)

    def test_power_cut_at_every_fs_operation(self):
        ops = scenario_ops()
        ref = MemFS()
        self.assertFalse(session(ref, ops, Expect(), room=self.room, cls=self.cls))
        total = ref.ops
        self.assertGreater(open_log(ref, self.room, self.cls).compactions + ref.syncs, 10)
        covered = 0
        for k in range(1, total + 1):
            fs = MemFS()
            expect = Expect()
            self.assertTrue(session(fs, ops, expect, cut=k, seed=k, room=self.room, cls=self.cls), "cut %d did not happen" % k)
            covered += 1
            where = "cut at fs op %d/%d" % (k, total)
            self.verify(fs, expect, where)
            self.check_still_works(fs, where)
        print("filelog power cuts: %d of %d fs operations covered" % (covered, total))
        self.assertEqual(covered, total)

    def test_two_power_cuts_in_a_row(self):
        ops = scenario_ops()
        ref = MemFS()
        session(ref, ops, Expect(), room=self.room, cls=self.cls)
        total = ref.ops
        pairs = 0
        for k in range(2, total + 1, 13):
            for second in (1, 2, 4, 9):
                fs = MemFS()
                expect = Expect()
                session(fs, ops, expect, cut=k, seed=k, room=self.room, cls=self.cls)
                self.verify(fs, expect, "first cut %d" % k)
                session(fs, ops, expect, cut=second, seed=k * 31 + second, room=self.room, cls=self.cls)
                where = "cuts at %d then %d" % (k, second)
                self.verify(fs, expect, where)
                self.check_still_works(fs, where)
                pairs += 1
        print("filelog double power cuts: %d pairs" % pairs)


class TestFileLogRoomPowerCuts(TestFileLogPowerCuts):
    """The same cuts with records written over a room of zeros (the host's log)."""

    room = 150

class TestFileLogGatheringPowerCuts(TestFileLogPowerCuts):
    """The same cuts with most records held back until a sync or a read,
    over a room (the host's log): a cut loses at most what was not synced."""

    room = 150
    cls = GatheringLog


class TestFileLogGathering(unittest.TestCase):
    def test_small_records_wait_for_one_write_at_the_sync(self):
        fs = MemFS()
        kv = open_log(fs, cls=GatheringLog)
        before = fs.ops
        for i in range(20):
            kv.put(b"k%02d" % i, b"v" * 40)
        kv.delete(b"k00")
        self.assertEqual(fs.ops, before)  # 21 records, nothing written yet
        kv.sync()
        self.assertEqual(fs.ops, before + 2)  # one write, one sync
        kv2 = open_log(fs, cls=GatheringLog)
        self.assertIsNone(kv2.get(b"k00"))
        self.assertEqual([kv2.get(b"k%02d" % i) for i in range(1, 20)], [b"v" * 40] * 19)

    def test_a_held_record_reads_back_and_a_full_batch_is_written(self):
        fs = MemFS()
        kv = open_log(fs, cls=GatheringLog)
        kv.put(b"a", b"first")
        self.assertEqual(kv.get(b"a"), b"first")  # written before the read
        before = fs.ops
        size = OVERHEAD + 3 + 100
        n = GatheringLog.batch // size + 1
        for i in range(n):
            kv.put(b"b%02d" % i, b"x" * 100)
        self.assertEqual(fs.ops, before + 1)  # the batch filled once: one write
        kv.put(b"big", b"B" * 5000)  # beyond a batch record: the held ones go first, in order
        kv.sync()
        kv2 = open_log(fs, cls=GatheringLog)
        self.assertEqual(kv2.get(b"a"), b"first")
        self.assertEqual(kv2.get(b"b%02d" % (n - 1)), b"x" * 100)
        self.assertEqual(kv2.get(b"big"), b"B" * 5000)
        self.assertEqual(kv2.skipped, 0)
