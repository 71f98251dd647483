# The heap Sparkplug B costs under MicroPython: docs/sparkplug.md quotes it.
#
#   MICROPYPATH=.:tests/upy/lib micropython tests/upy/sparkplug_heap.py
#   node tools/wasm_run.mjs --script tests/upy/sparkplug_heap.py    (32-bit)
#
# The modules imported from source. Prints, in bytes of gc.mem_alloc()
# after gc.collect():
#   code   what importing sparkplug.py + protobuf.py (sparkplug_aware), then
#          spb_node.py (sparkplug_group) adds, their broker dependencies loaded first
#   node   per edge node certified: NBIRTHs of NODES nodes (a 120-byte payload,
#          a topic spBv1.0/Plant1/NBIRTH/node-NN) with sparkplug_aware on,
#          less the same with it off, per node (the retained certificate)
#   client per connected client: none of it is per client (a Broker attribute,
#          the Sparkplug object once)
# Runs under MicroPython only (gc.mem_alloc).

import gc
import sys

NODES = 16
PAYLOAD = bytes(range(120))


def alloc():
    gc.collect()
    gc.collect()
    return gc.mem_alloc()


def code():
    # What the broker loads anyway, then the Sparkplug modules.
    import common.broker.handle_publish
    import common.broker.limits
    import common.broker.route
    import common.broker.sys_topics
    import common.mqtt.packets

    before = alloc()
    import common.broker.protobuf
    import common.broker.sparkplug

    aware = alloc() - before
    before = alloc()
    import common.broker.spb_node  # noqa: F401

    return aware, alloc() - before


def births(on):
    from tests.core.harness import Harness

    h = Harness(sparkplug_aware=on, max_retained=NODES * 2, max_messages=NODES * 4)
    node = h.client()
    node.connect("nodes")
    before = alloc()
    for i in range(NODES):
        node.publish("spBv1.0/Plant1/NBIRTH/node-%02d" % i, PAYLOAD)
    return alloc() - before


def main():
    aware, node = code()
    per_node = (births(True) - births(False)) // NODES
    print("| what | bytes |")
    print("|---|---|")
    print("| code: sparkplug.py + protobuf.py (sparkplug_aware) | %d |" % aware)
    print("| code: spb_node.py (sparkplug_group) | %d |" % node)
    print("| per edge node certified (%d-byte NBIRTH, its topic) | %d |" % (len(PAYLOAD), per_node))
    print("| per client | 0 |")
    print("(%s %s, %d-bit)" % (sys.implementation.name, ".".join(str(x) for x in sys.implementation.version[:3]), 64 if sys.maxsize > 2**32 else 32))


main()
