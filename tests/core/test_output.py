# The broker's output part (common/broker/output.py) on its own: the
# connections' buffers, the rounds of next_dirty, and the gate that keeps an
# ack back until the store's sync, over a listener that only says whether
# it holds changes not yet synced. Runs unchanged under MicroPython
# (tests/upy/run.py).

import unittest

from common.broker.connection import CLOSING, Connections
from common.broker.output import OUT_CHUNK_MIN, Output
from common.broker.settings import new_settings
from common.broker.stats import Stats
from common.broker.stats_counters import STATS_COUNTERS


class Store:
    """A listener with changes to sync or not (StateListener's face to Output)."""

    durable = True

    def __init__(self):
        self.unsynced = 0
        self.syncs = 0

    def pending(self):
        return self.unsynced > 0

    def sync(self):
        self.unsynced = 0
        self.syncs += 1


def rig(store_sync="always", **settings):
    store = Store()
    conns = Connections()
    out = Output(conns, Stats(), store, new_settings(dict(settings, store_sync=store_sync)))
    conn = conns.open()
    out.opened(conn.cid)
    return out, conn, store


def round_of(out, early=False):
    got = []
    cid = out.next_dirty(early)
    while cid >= 0:
        got.append((cid, out.take(cid)))
        cid = out.next_dirty(early)
    return got


class TestOutput(unittest.TestCase):
    def test_writes_coalesce_and_the_buffer_is_swapped(self):
        out, conn, _ = rig("batch")
        out.write(conn, b"ab")
        out.write(conn, b"cd")
        got = round_of(out)
        self.assertEqual([(cid, bytes(data)) for cid, data in got], [(conn.cid, b"abcd")])
        self.assertIsNot(got[0][1], conn.out)  # the spare went in
        self.assertEqual(out.stats.bytes_sent, 4)
        self.assertEqual(round_of(out), [])

    def test_a_backlog_goes_to_separate_objects(self):
        out, conn, _ = rig("batch", max_out_buffer=OUT_CHUNK_MIN)
        out.write(conn, b"x" * OUT_CHUNK_MIN)
        out.write(conn, b"y")
        self.assertEqual(len(conn.more), 1)
        self.assertEqual(out.take(conn.cid), b"x" * OUT_CHUNK_MIN + b"y")
        self.assertIsNone(conn.more)

    def test_paused_output_stays_until_resumed(self):
        out, conn, _ = rig("batch")
        out.write(conn, b"ab")
        out.set_paused(conn.cid, True)
        self.assertEqual(round_of(out), [(conn.cid, None)])
        out.set_paused(conn.cid, False)  # named again
        self.assertEqual([bytes(d) for _, d in round_of(out)], [b"ab"])

    def test_an_ack_waits_for_the_sync_and_keeps_its_order(self):
        out, conn, store = rig()
        store.unsynced = 1
        out.write(conn, b"P0", True)  # a delivery: may go before the sync
        out.write(conn, b"A1")  # an ack: waits
        out.write(conn, b"P2", True)  # after the ack: waits too
        self.assertEqual(out.waiting, 1)
        self.assertEqual([bytes(d) for _, d in round_of(out, True)], [b"P0"])
        self.assertEqual(store.syncs, 0)
        self.assertEqual([bytes(d) for _, d in round_of(out)], [b"A1P2"])
        self.assertEqual(store.syncs, 1)
        self.assertEqual(out.waiting, 0)

    def test_a_close_waits_for_the_sync(self):
        out, conn, store = rig()
        store.unsynced = 1
        conn.state = CLOSING
        out.closing(conn)
        self.assertTrue(out.unsynced())
        round_of(out, True)
        self.assertFalse(out.is_closing(conn.cid))
        round_of(out)
        self.assertTrue(out.is_closing(conn.cid))

    def test_a_lost_connection_waits_no_more(self):
        out, conn, store = rig()
        store.unsynced = 1
        out.write(conn, b"A1")
        out.lost(conn.cid)
        self.assertEqual(out.waiting, 0)

    def test_nothing_waits_without_always(self):
        out, conn, store = rig("batch")
        store.unsynced = 1
        out.write(conn, b"A1")
        self.assertIsNone(out.sync_from)
        self.assertFalse(out.unsynced())
        self.assertEqual([bytes(d) for _, d in round_of(out)], [b"A1"])
        self.assertEqual(store.syncs, 0)
        self.assertTrue(out.batch_ms > 0)  # the driver's timed syncs instead


class TestStats(unittest.TestCase):
    def test_the_names_table_names_every_counter(self):
        st = Stats()
        ints = []
        for name in dir(st):
            if not name.startswith("_") and isinstance(getattr(st, name), int):
                ints.append(name)
        self.assertEqual(sorted(ints), sorted(STATS_COUNTERS))


if __name__ == "__main__":
    unittest.main()
