# Source addresses against networks: "192.0.2.0/24", "10.1.2.3",
# "fd00::/8", "::1" (the [limits] login_budget_exempt list, secured.py).
#
# An address is (bits, value): 32 for IPv4, 128 for IPv6; an IPv4-mapped
# IPv6 address (::ffff:192.0.2.7, what a dual-stack socket reports for an
# IPv4 peer) counts as its IPv4 address. No `ipaddress` module (MicroPython
# has none): parsed here, strictly; None for anything that is not one.


def _ipv4(text):
    parts = text.split(".")
    if len(parts) != 4:
        return None
    value = 0
    for p in parts:
        if not p or len(p) > 3 or not p.isdigit() or int(p) > 255:
            return None
        value = (value << 8) | int(p)
    return value


def _groups(text):
    """The 16-bit groups of one side of an IPv6 address's "::" (None: bad)."""
    if not text:
        return []
    out = []
    parts = text.split(":")
    for i in range(len(parts)):
        p = parts[i]
        if i == len(parts) - 1 and "." in p:
            v4 = _ipv4(p)
            if v4 is None:
                return None
            out.append(v4 >> 16)
            out.append(v4 & 0xFFFF)
            continue
        if not 1 <= len(p) <= 4:
            return None
        try:
            out.append(int(p, 16))
        except ValueError:
            return None
    return out


def _ipv6(text):
    halves = text.split("::")
    if len(halves) > 2:
        return None
    head = _groups(halves[0])
    tail = _groups(halves[1]) if len(halves) == 2 else []
    if head is None or tail is None:
        return None
    missing = 8 - len(head) - len(tail)
    if missing < 0 or (len(halves) == 1 and missing) or (len(halves) == 2 and missing < 1):
        return None
    value = 0
    for g in head + [0] * missing + tail:
        value = (value << 16) | g
    return value


def parse_address(text):
    """(bits, value) of an IPv4 or IPv6 address ("[::1]" too), None if not one."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" not in text:
        v4 = _ipv4(text)
        return None if v4 is None else (32, v4)
    v6 = _ipv6(text)
    if v6 is None:
        return None
    if v6 >> 32 == 0xFFFF:  # ::ffff:a.b.c.d
        return (32, v6 & 0xFFFFFFFF)
    return (128, v6)


def parse_network(text):
    """(bits, value, prefix length) of "ADDRESS[/LENGTH]", None if not one."""
    slash = text.find("/")
    address = parse_address(text if slash < 0 else text[:slash])
    if address is None:
        return None
    bits, value = address
    length = bits
    if slash >= 0:
        tail = text[slash + 1 :]
        if not tail.isdigit() or int(tail) > bits:
            return None
        length = int(tail)
    if value & ((1 << (bits - length)) - 1):
        return None  # host bits set: "192.0.2.7/24" is a mistake, not a network
    return (bits, value, length)


def in_networks(address, networks):
    """Whether the address text is in one of `networks` (their texts, valid)."""
    a = parse_address(address)
    if a is None:
        return False
    for text in networks:
        bits, value, length = parse_network(text)
        if bits == a[0] and a[1] >> (bits - length) == value >> (bits - length):
            return True
    return False
