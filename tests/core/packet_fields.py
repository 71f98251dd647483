# Packets compared and printed by their fields, for the tests: the packet
# classes (common/mqtt/packets.py) have no field table, __eq__ or __repr__,
# whose code and tables would take a board's heap for what only tests do.
# Runs on CPython and MicroPython.


def fields(pkt):
    """`pkt` as a tuple that compares and prints by value: its class name
    and (name, value) for each of its fields (its attributes and its class's
    defaults, such as CONNECT's will), in name order, with no properties
    (None) and an empty list of them alike."""
    cls = type(pkt)
    names = [name for name in dir(cls) if name[0] != "_" and not callable(getattr(cls, name))]
    for name in pkt.__dict__:
        if name not in names:
            names.append(name)
    names.sort()
    out = [cls.__name__]
    for name in names:
        value = getattr(pkt, name)
        if not value and name.endswith("props"):
            value = None
        out.append((name, value))
    return tuple(out)
