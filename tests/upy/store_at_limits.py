# The persistent state a board leaves in its store at its board file's
# limits, made through the tests/core harness (its clients joined to one
# broker in memory): two subscribers and 50 PUBLISHes at QoS 0/1, a
# persistent session with a queued QoS 1 message, every client slot
# connected with persistent sessions, the subscriptions shared among them,
# the retained pool full. The firmware that starts next over this store
# must restore it.
#
#   on the emulated board: tests/upy/emu_selftest.py (make test-emu)
#   on the unix port:      micropython store_at_limits.py BOARD.json STORE_PATH
#                          (tests/host/test_firmware_boards.py; prints "FILLED")

from common.mqtt import consts as C


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


def leave_state(h, limits):
    """Everything above, in the order the self-test has always made it."""
    round_trips(h, limits)
    # What the firmware must find after the reset: a persistent session with
    # its subscription and a queued QoS 1 message, and a retained message.
    h.offline_subscriber("keeper", "keep/#", drop=True)
    sender = h.client()
    sender.connect("sender")
    sender.publish("keep/queued", b"q", qos=1, packet_id=7)
    sender.disconnect()
    h.pump()
    fill(h, limits)


def main(argv):
    import json
    import time

    from harness import Harness

    from firmware import storage
    from firmware.boardcfg import load_board
    from firmware.shell import Log

    board, path = argv
    settings, _opts = load_board(board)
    with open(board) as f:
        limits = json.load(f)["limits"]
    cfg = {"storage": path, "storage_key_file": path + ".key"}
    store = storage.open_store(cfg, Log("warning"), storage.index_keys(settings))
    # The wall clock the firmware restores with (see emu_selftest.py).
    h = Harness(store=store, wall=int(time.time()), **limits)
    leave_state(h, limits)
    store.sync()
    print("FILLED")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
