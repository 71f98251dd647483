# The core self-test on the chip (make test-emu: tests/emu/test_emu.py puts
# this file on the emulated board's file system as /main.py, with
# tests/core/harness.py and tests/upy/store_at_limits.py beside it). The
# frozen main.py of the image runs it instead of the broker. It drives the image's frozen core in memory
# (tests/core/harness.py: clients joined to one broker, bytes moved by hand)
# with the board file's limits and the store on the board's littlefs, then
# leaves persistent state in that store, removes itself and resets the chip:
# the firmware that boots next must restore it.
#
# Output lines (the test reads them):
#   SELFTEST heap start free=F alloc=A       the harness's broker made (pools preallocated)
#   SELFTEST delivered N                     QoS 0 and 1 PUBLISHes that reached the subscribers
#   SELFTEST heap limits free=F alloc=A      every pool of the board file full
#   SELFTEST ok                              then the reset

import gc
import json
import os
import time

from harness import Harness
from store_at_limits import leave_state

from firmware import storage
from firmware.boardcfg import builtin_board, load_board
from firmware.shell import Log

BOARD = "rp2040_picow"


def heap(what):
    gc.collect()
    print("SELFTEST heap %s free=%d alloc=%d" % (what, gc.mem_free(), gc.mem_alloc()))


def main():
    cfg = {"storage": "/siskin.store", "storage_key_file": "/siskin.key"}
    settings, _opts = load_board("/boards/%s.json" % BOARD, builtin=builtin_board(BOARD))
    limits = json.loads(builtin_board(BOARD))["limits"]
    store = storage.open_store(cfg, Log("warning"), storage.index_keys(settings))
    # The board's own wall clock, as the firmware restores with: the
    # harness's default (November 2023) is long before the board's clock,
    # so after the reset every persistent session would have expired, and
    # its queued message with it (a dry run on the unix port, whose clock is
    # the host's: "restored ... 0 queued messages").
    h = Harness(store=store, wall=int(time.time()), **limits)
    heap("start")
    leave_state(h, limits)
    heap("limits")
    store.sync()
    os.remove("/main.py")
    print("SELFTEST ok")
    import machine

    machine.reset()


main()
