# The core self-test on the chip (make test-emu: tests/emu/test_emu.py puts
# this file on the emulated board's file system as /main.py, with
# tests/core/harness.py as /harness.py). The frozen main.py of the image runs
# it instead of the broker. It drives the image's frozen core in memory
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

from common.mqtt import consts as C
from firmware import storage
from firmware.boardcfg import builtin_board, load_board
from firmware.shell import Log

BOARD = "rp2040_picow"


def heap(what):
    gc.collect()
    print("SELFTEST heap %s free=%d alloc=%d" % (what, gc.mem_free(), gc.mem_alloc()))


def round_trips(h, limits):
    """2 subscribers (QoS 0 and 1) and 50 PUBLISHes at QoS 0/1, then a retained one."""
    subs = []
    for i, qos in ((0, 0), (1, 1)):
        c = h.client()
        c.connect("sub%d" % i)
        c.subscribe("st/#", qos=qos)
        subs.append(c)
    pub = h.client()
    pub.connect("pub")
    h.pump()
    for c in subs + [pub]:
        c.take()
    delivered = 0
    for n in range(50):
        pub.publish("st/%d" % (n % 5), b"m%d" % n, qos=n % 2, packet_id=n + 1)
        h.pump()
        pub.take()  # its PUBACKs
        for c in subs:
            for p in c.take():
                if p.ptype == C.PUBLISH:
                    delivered += 1
                    if p.qos:
                        c.ack(p)
        h.pump()
    pub.publish("st/retained", b"kept", qos=1, retain=True, packet_id=99)
    h.pump()
    late = h.client()
    late.connect("late")
    late.subscribe("st/retained")
    h.pump()
    retained = [p for p in late.take() if p.ptype == C.PUBLISH and p.retain]
    print("SELFTEST delivered %d retained %d" % (delivered, len(retained)))
    for c in subs + [pub, late]:
        c.disconnect()
    h.pump()


def fill(h, limits):
    """Every client slot connected (persistent sessions), the subscriptions
    shared among them, the retained pool full."""
    clients = []
    per = limits["max_subscriptions"] // limits["max_connections"]
    for i in range(limits["max_connections"]):
        c = h.client()
        c.connect("fill%d" % i, clean=False)
        for j in range(min(per, limits["max_subscriptions_per_client"])):
            c.subscribe("fill/%d/%d" % (i, j), qos=1, packet_id=j + 1)
        clients.append(c)
        h.pump()
        c.take()
    for i in range(limits["max_retained"]):
        clients[0].publish("ret/%d" % i, b"r" * 64, retain=True)
        h.pump()
    return clients


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
    round_trips(h, limits)
    # What the firmware must find after the reset: a persistent session with
    # its subscription and a queued QoS 1 message, and a retained message.
    keeper = h.client()
    keeper.connect("keeper", clean=False)
    keeper.subscribe("keep/#", qos=1)
    keeper.drop()
    sender = h.client()
    sender.connect("sender")
    sender.publish("keep/queued", b"q", qos=1, packet_id=7)
    sender.disconnect()
    h.pump()
    fill(h, limits)
    heap("limits")
    store.sync()
    os.remove("/main.py")
    print("SELFTEST ok")
    import machine

    machine.reset()


main()
