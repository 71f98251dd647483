# Store damage is never silent and never spreads, on
# both backends: common/store/filelog.py over tests/core/memfs.py and
# common/store/kvlog.py over tests/core/flashsim.py (real files:
# tests/host/test_filelog_posix.py; a whole broker: tests/host/test_persist_host.py).
#
# Each case damages a stopped store the way a disk, a flash chip or a person
# can, opens it again and checks what came back, what was counted and what
# was said: a damaged record costs only itself (the scan resynchronises on
# the next valid record) and its bytes are kept; a store that cannot be read
# at all is set aside and said at error level; a torn tail says its size;
# a value of the wrong shape is skipped, counted and logged.

import unittest

from common.store.filelog import CORRUPT_SUFFIX, DAMAGED_SUFFIX, FILE_HEADER_SIZE
from common.store.filelog_open import open_file_log
from common.store.kvlog import DAMAGED_PREFIX, KVLog
from common.store.persist import NS_RETAINED, NS_SESSION
from common.store.store import Store
from common.store.store_open import open_records
from tests.core.flashsim import FlashSim, XorShift
from tests.core.harness import Harness
from tests.core.kv_contract import items
from tests.core.memfs import MemFS

PATH = "/data/siskin.log"
BLOCK = 1024


def value_of(i):
    return b"value-%d-" % i + b"x" * (i % 7)


def opened(backend):
    """An opened Store over `backend` and the list its log lines go to."""
    logged = []

    def log(level, text):
        logged.append((level, text))

    store = Store(backend, log=log)
    open_records(store)
    return store, logged


class Damage:
    """The cases; a subclass gives the backend and how to reach its bytes."""

    def new(self):
        raise NotImplementedError

    def index(self):
        """key -> (absolute position, size) of every live record, read by a fresh open."""
        raise NotImplementedError

    def flip(self, pos, xor):
        raise NotImplementedError

    def kept(self, kv):
        """The bytes the backend kept of damaged records."""
        raise NotImplementedError

    def seeded(self, n=30):
        kv = self.new()
        for i in range(n):
            kv.put(b"k%02d" % i, value_of(i))
        kv.close()

    def victim(self):
        """A key whose record has other records after it (in its sector, on flash)."""
        return b"k15"

    def test_flipped_header_byte_costs_only_that_record(self):
        self.seeded()
        key = self.victim()
        pos, size = self.index()[key]
        original = self.read(pos, size)
        self.flip(pos + 3, 0x01)  # the key length's high byte: 3 -> 259
        kv2 = self.reopen()
        self.assertEqual(kv2.skipped, 1)
        for i in range(30):
            k = b"k%02d" % i
            self.assertEqual(kv2.get(k), None if k == key else value_of(i), k)
        text = " ".join(t for level, t in kv2.notes if level == 30)
        self.assertIn("damaged record", text)
        # The damaged bytes are kept, apart from the damaged byte itself.
        kept = self.kept(kv2)
        self.assertIn(original[4:], kept)
        kv2.put(b"after", b"1")
        kv2.sync()
        kv2.close()
        kv3 = self.reopen()
        # The file log rewrote itself without the damage; on flash it stays
        # in its sector (said again at each mount) until compaction erases it.
        self.assertEqual(kv3.skipped, self.damage_stays)
        self.assertEqual(len(kv3.notes), self.damage_stays)
        self.assertEqual(kv3.get(b"after"), b"1")
        self.assertEqual(kv3.get(b"k29"), value_of(29))
        self.assertIn(original[4:], self.kept(kv3))

    def with_keeper(self):
        """A broker over a new store, with an offline persistent session "keeper"."""
        store = Store(self.new())
        open_records(store)
        h = Harness(store=store)
        keeper = h.client()
        keeper.connect("keeper", clean=False)
        keeper.subscribe("q/#", qos=1)
        keeper.disconnect()
        return store, h

    def test_bad_crc_is_counted_in_the_restore_line_and_logged(self):
        store, h = self.with_keeper()
        pub = h.client()
        pub.connect("pub")
        for i in range(3):
            pub.publish("r/%d" % i, b"retained-%d" % i, qos=1, retain=True, packet_id=i + 1)
        store.close()
        pos = self.index()[NS_RETAINED + b"r/1"][0]
        self.flip(pos + 12 + 4, 0x20)  # a byte of the value: the CRC fails
        h2, logged = self.restart()
        self.assertEqual(h2.restored["retained"], 2)
        self.assertEqual(h2.restored["sessions"], 1)
        self.assertEqual(h2.restored["skipped"], 1)
        self.assertTrue([t for level, t in logged if level == 30 and "damaged record" in t and "r/1" in t], logged)

    def test_values_of_the_wrong_shape_are_skipped_counted_and_logged(self):
        store, _h = self.with_keeper()
        # Valid checksums, wrong values: a session and a retained message.
        store.put(NS_SESSION, b"short", [4, 60])
        store.put(NS_RETAINED, b"r/short", [b"payload"])
        store.put(NS_RETAINED, b"r/typed", ["not bytes", 1, None, 0])
        store.put(NS_RETAINED, b"r/\xff", [b"payload", 1, None, 0])  # a topic that is not UTF-8
        store.close()
        h2, logged = self.restart()
        self.assertEqual(h2.restored["sessions"], 1)
        self.assertEqual(h2.restored["retained"], 0)
        self.assertEqual(h2.restored["skipped"], 4)
        text = " ".join(t for level, t in logged if level == 30)
        for key in ("Sshort", "Rr/short", "Rr/typed", "Rr/\\xff"):
            self.assertIn(key, text)
        self.assertIsNone(h2.broker.sessions.find("short"))

    def restart(self):
        store, logged = opened(self.reopen())
        return Harness(store=store), logged


class TestFileLogDamage(Damage, unittest.TestCase):
    """Over tests/core/memfs.py; tests/host/test_filelog_posix.py runs the same on real files."""

    damage_stays = 0
    path = PATH

    def setUp(self):
        self.fs = MemFS()

    def file(self, path):
        """The bytes of the file at `path`."""
        return bytes(self.fs.names[path].data)

    def write(self, path, data, mode="wb"):
        f = self.fs.open(path, mode)
        f.write(data)
        self.fs.sync(f)
        f.close()

    def new(self):
        return open_file_log(self.fs, self.path)

    reopen = new

    def index(self):
        return open_file_log(self.fs, self.path).index

    def read(self, pos, n):
        return self.file(self.path)[pos : pos + n]

    def flip(self, pos, xor):
        data = bytearray(self.file(self.path))
        data[pos] ^= xor
        self.write(self.path, bytes(data))

    def kept(self, kv):
        return self.file(self.path + DAMAGED_SUFFIX)

    def test_unreadable_file_is_set_aside_and_said_at_error_level(self):
        rng = XorShift(5)
        self.seeded()
        damaged_header = bytearray(self.file(self.path))
        damaged_header[2] ^= 0x08
        cases = (
            ("damaged header", bytes(damaged_header)),
            ("zeros", bytes(4096)),
            ("0xFF", b"\xff" * 4096),
            ("random", bytes([rng.below(256) for _ in range(4096)])),
        )
        for n, (what, data) in enumerate(cases):
            self.write(self.path, data)
            store, logged = opened(self.new())
            aside = self.path + CORRUPT_SUFFIX + ("" if n == 0 else ".%d" % n)
            self.assertEqual(self.file(aside), data, what)  # kept whole, none replaced
            errors = [t for level, t in logged if level == 40]
            self.assertEqual(len(errors), 1, (what, logged))
            self.assertIn(aside, errors[0])
            self.assertEqual(Harness(store=store).restored["skipped"], 1, what)
            store.close()

    def test_torn_tail_says_how_many_bytes(self):
        self.seeded(5)
        size = len(self.file(self.path))
        self.write(self.path, b"\xa5\x00\x03\x00\x40\x00\x00\x00k99", "ab")  # a record cut short after its key
        kv = self.reopen()
        self.assertEqual(kv.torn, 11)
        self.assertEqual(kv.skipped, 0)
        self.assertIn("torn tail of 11 bytes", " ".join(t for _, t in kv.notes))
        self.assertEqual(len(self.file(self.path)), size)
        self.assertEqual(kv.get(b"k04"), value_of(4))
        self.assertGreater(size, FILE_HEADER_SIZE)


class TestKVLogDamage(Damage, unittest.TestCase):
    damage_stays = 1

    def setUp(self):
        self.dev = FlashSim(16, BLOCK)

    def new(self):
        return KVLog(self.dev)

    def reopen(self):
        return KVLog(self.dev)

    def index(self):
        out = {}
        for key, (sector, off, size) in KVLog(self.dev)._index.items():
            out[key] = (sector * BLOCK + off, size)
        return out

    def read(self, pos, n):
        return bytes(self.dev.mem[pos : pos + n])

    def flip(self, pos, xor):
        self.dev.mem[pos] ^= xor

    def victim(self):
        index = self.index()
        for i in range(30):
            key = b"k%02d" % i
            pos = index[key][0]
            if any(p // BLOCK == pos // BLOCK and p > pos for p, _ in index.values()):
                return key
        raise AssertionError("no record is followed by another in its sector")

    def kept(self, kv):
        return b"".join(v for k, v in items(kv, DAMAGED_PREFIX))

    def test_unreadable_partition_is_said_at_error_level(self):
        rng = XorShift(9)
        for what, fill in (("zeros", lambda: 0), ("random", lambda: rng.below(256))):
            self.dev = FlashSim(16, BLOCK)
            for i in range(len(self.dev.mem)):
                self.dev.mem[i] = fill()
            _store, logged = opened(KVLog(self.dev))
            errors = [t for level, t in logged if level == 40]
            self.assertEqual(len(errors), 1, (what, logged))
            self.assertIn("no Siskin store", errors[0])
        # A fresh (erased) partition is not damage: nothing said.
        self.dev = FlashSim(16, BLOCK)
        self.assertEqual(KVLog(self.dev).notes, [])

    def test_damaged_sector_header_is_said_at_error_level(self):
        self.seeded(100)  # several sectors
        sector = self.index()[b"k00"][0] // BLOCK
        self.flip(sector * BLOCK + 5, 0x01)  # the erase count: part A's CRC fails
        kv2 = self.reopen()
        errors = [t for level, t in kv2.notes if level == 40]
        self.assertEqual(len(errors), 1, kv2.notes)
        self.assertIn("flash sector %d" % sector, errors[0])

    def test_torn_tail_says_how_many_bytes(self):
        self.seeded(5)
        pos, size = self.index()[b"k04"]
        pos += size
        self.dev.mem[pos : pos + 11] = b"\xa5\x00\x03\x00\x40\x00\x00\x00k99"
        kv = self.reopen()
        self.assertEqual(kv.torn, 11)
        self.assertEqual(kv.skipped, 0)
        self.assertIn("torn tail of 11 bytes", " ".join(t for _, t in kv.notes))
        self.assertEqual(kv.get(b"k04"), value_of(4))


if __name__ == "__main__":
    unittest.main()
