# Packets compared and printed by their fields, for the tests: the packet
# classes (common/mqtt/packets.py) have no __eq__ or __repr__, whose code
# would take a board's heap for what only tests do. Runs on CPython and
# MicroPython.


def fields(pkt):
    """`pkt` as a tuple that compares and prints by value: its class name,
    its type and (name, value) for each of its FIELDS, with no properties
    (None) and an empty list of them alike."""
    out = [type(pkt).__name__, pkt.ptype]
    for name in pkt.FIELDS:
        value = getattr(pkt, name)
        if not value and name.endswith("props"):
            value = None
        out.append((name, value))
    return tuple(out)
