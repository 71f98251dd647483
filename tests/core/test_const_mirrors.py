# A module of common/ may keep private const() copies of the public names
# of common/mqtt/consts.py (`_PUBLISH = const(3)` for C.PUBLISH): MicroPython
# folds them into its bytecode, where C.NAME takes a global and an attribute
# load at every use (docs/boards.md, "What the code takes"). consts.py stays
# the one place that names a value: every copy must hold the value of the
# public name it copies. On CPython and MicroPython (tests/upy/run.py).

import unittest

from common.mqtt import consts as C
from tests.core.test_sans_io import _read, common_sources


def mirrors_in(text):
    """[(name, literal)] of the module-level `_NAME = const(literal)` lines
    of `text` whose NAME is a public name of consts.py."""
    found = []
    for line in text.split("\n"):
        if not line.startswith("_") or " = const(" not in line or not line.endswith(")"):
            continue
        name, literal = line[1:].split(" = const(", 1)
        if hasattr(C, name):
            found.append((name, literal[:-1]))
    return found


def wrong_mirrors(sources):
    """[(path, name, literal)] of the copies whose value is not consts.py's."""
    bad = []
    for _module, path in sources:
        for name, literal in mirrors_in(_read(path)):
            if int(literal, 0) != getattr(C, name):
                bad.append((path.split("/common/")[-1], name, literal))
    return bad


class TestConstMirrors(unittest.TestCase):
    def test_every_copy_holds_the_public_value(self):
        self.assertEqual(wrong_mirrors(common_sources()), [])

    def test_the_per_packet_modules_have_copies(self):
        # (So that the check above judges something.)
        counted = {}
        for module, path in common_sources():
            counted[module] = len(mirrors_in(_read(path)))
        for module in ("common.mqtt.packets", "common.broker.broker", "common.broker.handle_publish"):
            self.assertTrue(counted[module] > 0, module)

    def test_check_catches_a_wrong_copy(self):
        text = "_PUBLISH = const(3)\n_RC_QUOTA_EXCEEDED = const(0x98)\n_OWN = const(7)\n    _PUBACK = const(5)\n"
        self.assertEqual(mirrors_in(text), [("PUBLISH", "3"), ("RC_QUOTA_EXCEEDED", "0x98")])
        self.assertEqual([int(v, 0) == getattr(C, n) for n, v in mirrors_in(text)], [True, False])


if __name__ == "__main__":
    unittest.main()
