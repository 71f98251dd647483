# common/ is sans-I/O: importing any of its modules needs no I/O or clock
# module (DESIGN.md "Layout"; CONVENTIONS.md "No I/O, no clock").
#
# Runs on CPython (pytest) and on MicroPython (tests/upy/run.py, unix and
# wasm ports), two ways:
#
# 1. Statically: every import statement in every file of common/, including
#    imports inside functions and inside try/except feature detection,
#    names no forbidden module. (On CPython the `ast` module double-checks the
#    line scanner.)
# 2. Dynamically: with every forbidden name in sys.modules replaced by a
#    poison object, each module of common/ is imported afresh. A
#    `from time import x` raises ImportError; a plain `import time` binds the
#    poison, which we then find in the module's globals. (`sys.modules[name]
#    = None` blocks imports on CPython but not on MicroPython, where the
#    import simply binds None; a poison object behaves the same on both.)
#    Everything outside common/ that common/ imports is loaded once before
#    the poison goes in, so only common/'s own imports are judged.

import os
import sys
import unittest

FORBIDDEN = (
    "socket", "usocket",
    "asyncio", "uasyncio", "_asyncio",
    "select", "uselect", "selectors",
    "time", "utime",
    "os", "uos",
    "ssl", "ussl", "tls",
    "machine", "network",
    "threading", "_thread",
    "subprocess",
)  # fmt: skip

_TAIL = "/tests/core/test_sans_io.py"


def _repo_root():
    here = __file__
    if not here.endswith(_TAIL):
        here = os.getcwd().rstrip("/") + "/" + here.lstrip("./")
    return here[: -len(_TAIL)]


def _is_dir(path):
    return os.stat(path)[0] & 0x4000 != 0


def common_sources():
    """[(module name, file path)] for every .py file under common/, sorted."""
    root = _repo_root()
    found = []

    def walk(rel):
        for name in os.listdir(root + "/" + rel):
            if name == "__pycache__":
                continue
            path = root + "/" + rel + "/" + name
            if _is_dir(path):
                try:
                    os.stat(path + "/__init__.py")
                except OSError:
                    continue  # not a package
                walk(rel + "/" + name)
            elif name.endswith(".py"):
                modname = rel.replace("/", ".")
                if name != "__init__.py":
                    modname += "." + name[:-3]
                found.append((modname, path))

    walk("common")
    found.sort()
    return found


def _imported_modules(statement):
    """Dotted module names an import statement names ([] if it is not one).

    `from common import a, b` names common.a and common.b (each may be a
    package part); a relative import keeps its leading dot."""
    words = statement.split()
    if not words:
        return []
    if words[0] == "import":
        names = []
        for part in statement[len("import") :].split(","):
            part = part.strip().split(" ")[0].strip("()")
            if part:
                names.append(part)
        return names
    if words[0] == "from" and len(words) >= 4 and words[2] == "import":
        module = words[1]
        if module != "common":
            return [module]
        names = []
        for part in statement.split(" import ", 1)[1].split(","):
            part = part.strip().split(" ")[0].strip("()")
            if part:
                names.append("common." + part)
        return names
    return []


def scan_modules(text):
    """[(line number, dotted module name)] for every import statement in a
    source, skipping the insides of triple-quoted strings."""
    found = []
    in_string = None
    lineno = 0
    for line in text.split("\n"):
        lineno += 1
        stripped = line.strip()
        if in_string is not None:
            if stripped.count(in_string) % 2 == 1:
                in_string = None
            continue
        for quote in ('"""', "'''"):
            if stripped.count(quote) % 2 == 1:
                # Code before an opening quote may still be an import (rare).
                in_string = quote
                break
        if stripped.startswith("#"):
            continue
        for statement in stripped.split(";"):
            for name in _imported_modules(statement.strip()):
                found.append((lineno, name))
    return found


def scan_imports(text):
    """[(line number, top-level module name)]; relative imports are inside common/."""
    return [(n, m.split(".")[0]) for n, m in scan_modules(text) if not m.startswith(".")]


def _read(path):
    with open(path) as f:
        return f.read()


class _Poison:
    """Stands in sys.modules for a forbidden module."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        raise ImportError("sans-I/O: common/ touched forbidden module %s (.%s)" % (self.name, attr))


def _common_entries():
    return [name for name in sys.modules if name == "common" or name.startswith("common.")]


class TestSansIO(unittest.TestCase):
    def test_common_has_modules(self):
        names = [m for m, _ in common_sources()]
        self.assertIn("common", names)

    def test_no_forbidden_import_statements(self):
        bad = []
        for _modname, path in common_sources():
            for lineno, name in scan_imports(_read(path)):
                if name in FORBIDDEN:
                    bad.append("%s:%d imports %s" % (path, lineno, name))
        self.assertEqual(bad, [])

    def test_line_scanner_agrees_with_ast(self):
        try:
            import ast
        except ImportError:
            self.skipTest("no ast module on this interpreter; the line scanner alone is used")
        for _modname, path in common_sources():
            text = _read(path)
            expected = []
            for node in ast.walk(ast.parse(text, path)):
                if isinstance(node, ast.Import):
                    expected.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    expected.append((node.lineno, node.module.split(".")[0]))
            got = scan_imports(text)
            # The line scanner may also find the same import twice (never
            # fewer); what matters is that it misses none.
            for item in expected:
                self.assertIn(item, got, "line scanner missed an import in %s" % path)

    def test_import_with_io_and_clock_blocked(self):
        sources = common_sources()
        problems = []
        # Load common/ and whatever it imports from outside, unpoisoned first.
        for modname, _ in sources:
            try:
                __import__(modname)
            except ImportError as e:
                problems.append("%s does not import even unpoisoned: %s" % (modname, e))
        saved = {}
        for name in _common_entries():
            saved[name] = sys.modules[name]
        blocked = {}
        for name in FORBIDDEN:
            if name in sys.modules:
                blocked[name] = sys.modules[name]
        try:
            for name in FORBIDDEN:
                sys.modules[name] = _Poison(name)
            for modname, _ in sources:
                for name in _common_entries():
                    del sys.modules[name]
                try:
                    __import__(modname)
                    module = sys.modules[modname]
                except ImportError as e:
                    problems.append("%s: %s" % (modname, e))
                    continue
                for attr in dir(module):
                    if isinstance(getattr(module, attr), _Poison):
                        problems.append("%s binds forbidden module as %s" % (modname, attr))
        finally:
            for name in FORBIDDEN:
                if name in blocked:
                    sys.modules[name] = blocked[name]
                else:
                    del sys.modules[name]
            for name in _common_entries():
                del sys.modules[name]
            for name in saved:
                sys.modules[name] = saved[name]
        self.assertEqual(problems, [])


# The layers of common/, bottom up (docs/architecture.md "Layers"). A module
# may import its own part and parts of a lower rank, never a part of its own
# rank or above: the wire codec knows nothing of brokers, the broker nothing
# of the store, and only the driver sees everything.
LAYERS = {
    "compat": 0,  # platform shims
    "mqtt": 1,  # the wire: codec, packets, properties, reason codes
    "crypto": 1,  # AES-GCM, HKDF, HMAC, SCRAM
    "backoff": 1,  # the back-off between attempts (the bridge's reconnects, the uplink's redials)
    "inprocess": 1,  # the driver's handle for a peer inside the process (bridge, MQTT-SN)
    "broker": 2,  # the state machine
    "client": 2,  # the MQTT client (the bridge's two ends)
    "mqttsn": 3,  # MQTT-SN v1.2: the wire codec, topic ids (the gateway will drive the broker)
    "store": 3,  # records, backends, the persistence listener
    "bridge": 3,  # store-and-forward to an upstream broker
    "uplink": 3,  # the PPP uplink's dial-up script and supervisor
    "driver": 4,  # what both shells would otherwise repeat
    "turns": 5,  # fairness between connections, for a shell that reads many at once
    "startup": 5,  # the start-up both shells run (assemble, restore, security lines)
}


def part_of(module):
    """The layer part of a dotted name under common/ (None outside common/)."""
    names = module.split(".")
    if names[0] != "common" or len(names) < 2:
        return None
    return names[1]


def layer_violations(sources):
    bad = []
    known = {m for m, _ in sources}
    for modname, path in sources:
        here = part_of(modname)
        if here is None:
            continue  # common/__init__.py
        if here not in LAYERS:
            bad.append("%s: %s is in no layer (add it to LAYERS)" % (path, here))
            continue
        for lineno, module in scan_modules(_read(path)):
            if module.startswith("."):
                bad.append("%s:%d: relative import %s (write common.<part>...)" % (path, lineno, module))
                continue
            there = part_of(module)
            if there is None or there == here or (there not in LAYERS and module not in known):
                continue  # (not in LAYERS and no module: a name of the package, common.VERSION)
            if there not in LAYERS or LAYERS[there] >= LAYERS[here]:
                bad.append("%s:%d: %s (layer %s) imports %s" % (path, lineno, modname, here, module))
    return bad


def import_graph(sources):
    """{module: set of the modules of `sources` it imports}, imports inside
    functions included: `from common.broker import outbox` imports the
    module common.broker.outbox, `from common.broker.route import route` the
    module common.broker.route."""
    known = {m for m, _ in sources}
    graph = {}
    for modname, path in sources:
        deps = set()
        text = _read(path)
        for _lineno, module in scan_modules(text):
            if module in known:
                deps.add(module)
        for line in text.split("\n"):
            words = line.split()
            if len(words) >= 4 and words[0] == "from" and words[2] == "import":
                for part in line.split(" import ", 1)[1].split(","):
                    name = words[1] + "." + part.strip().split(" ")[0].strip("()")
                    if name in known:
                        deps.add(name)
        deps.discard(modname)
        graph[modname] = deps
    return graph


def import_cycles(sources):
    """The import cycles among `sources`: a sorted list of the modules of
    each group that import one another, directly or through others (the
    strongly connected components of import_graph with more than one)."""
    graph = import_graph(sources)
    # Tarjan's algorithm, without recursion (MicroPython's stack is small).
    index = {}
    low = {}
    stack = []
    on_stack = set()
    cycles = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, sorted(graph[root]), 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, deps, i = work[-1]
            if i < len(deps):
                work[-1] = (node, deps, i + 1)
                dep = deps[i]
                if dep not in index:
                    index[dep] = low[dep] = counter
                    counter += 1
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, sorted(graph[dep]), 0))
                elif dep in on_stack and index[dep] < low[node]:
                    low[node] = index[dep]
                continue
            work.pop()
            if work and low[node] < low[work[-1][0]]:
                low[work[-1][0]] = low[node]
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    cycles.sort()
    return cycles


def with_probes(probes, check):
    """check([(module name, path)]) while the probe modules exist:
    {"part/_name": source} under common/ (removed after)."""
    root = _repo_root()
    made = []
    try:
        for rel in sorted(probes):
            path = root + "/common/" + rel + ".py"
            with open(path, "w") as f:
                f.write(probes[rel])
            made.append(("common." + rel.replace("/", "."), path))
        return check(made)
    finally:
        for _name, path in made:
            os.remove(path)


class TestLayers(unittest.TestCase):
    def test_imports_point_down(self):
        self.assertEqual(layer_violations(common_sources()), [])

    def test_every_layer_exists(self):
        parts = set()
        for modname, _ in common_sources():
            parts.add(part_of(modname))
        for name in LAYERS:
            self.assertIn(name, parts)

    def test_check_catches_an_upward_import(self):
        # The check itself: a broker module importing the store is refused.
        text = "from common.store.store import Store\nfrom common import compat, driver\n"
        bad = with_probes({"broker/_layer_probe": text}, layer_violations)
        self.assertEqual(len(bad), 2, bad)
        self.assertIn("imports common.store.store", bad[0])
        self.assertIn("imports common.driver", bad[1])


class TestNoCycles(unittest.TestCase):
    # No module of common/ imports, directly or through others, one that
    # imports it back (not even inside a function): each part can be read,
    # loaded and unloaded (a board's start-up halves) on its own.
    def test_no_import_cycles(self):
        self.assertEqual(import_cycles(common_sources()), [])

    def test_check_catches_a_cycle(self):
        # The check itself: two probes that import each other, one of them
        # inside a function, as start-up halves used to.
        probes = {
            "store/_cycle_probe_a": "from common.store import _cycle_probe_b\n",
            "store/_cycle_probe_b": "def later():\n    from common.store._cycle_probe_a import x\n",
        }
        cycles = with_probes(probes, lambda _probes: import_cycles(common_sources()))
        self.assertEqual(cycles, [["common.store._cycle_probe_a", "common.store._cycle_probe_b"]])

    def test_graph_resolves_every_import_form(self):
        graph = import_graph(common_sources())
        self.assertIn("common.broker.outbox", graph["common.broker.route"])  # from x.route import names
        self.assertIn("common.broker.outbox", graph["common.broker.broker"])  # from common.broker import outbox
        self.assertIn("common.store.restore", graph["common.store.storeboot"])  # inside a function


# At most this many parameters to a function of common/ (self not counted):
# more is a record to pass whole, or two jobs in one function.
MAX_PARAMETERS = 7


def functions_over(limit, sources):
    """[(path under common/, function name, parameters)] of the functions of
    `sources` with more than `limit` parameters (`self`/`cls` not counted)."""
    import ast

    root = _repo_root() + "/"
    found = []
    for _modname, path in sources:
        for node in ast.walk(ast.parse(_read(path), path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args]
                n = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
                if names and names[0] in ("self", "cls"):
                    n -= 1
                if n > limit:
                    found.append((path[len(root) :], node.name, n))
    return found


class TestSmallFunctions(unittest.TestCase):
    def setUp(self):
        try:
            import ast  # noqa: F401
        except ImportError:
            self.skipTest("no ast module on this interpreter; CPython checks the parameters")

    def test_no_function_takes_more_than_seven_parameters(self):
        over = functions_over(MAX_PARAMETERS, common_sources())
        self.assertEqual(over, [])

    def test_check_counts_parameters(self):
        text = "def wide(a, b, c, d, e, f, g, h):\n    pass\n\n\nclass K:\n    def m(self, a, b, c, d, e, f, g):\n        pass\n"
        over = with_probes({"broker/_params_probe": text}, lambda probes: functions_over(MAX_PARAMETERS, probes))
        self.assertEqual(over, [("common/broker/_params_probe.py", "wide", 8)])


class TestScanner(unittest.TestCase):
    # The checks above are only as good as the scanner; prove it on samples.
    def test_finds_every_import_form(self):
        text = "\n".join(
            (
                "import time",
                "import struct, os.path as p",
                "from socket import socket",
                "    from . import codec",
                "def f():",
                "    import utime",
                "x = 1; import select",
                "# import machine",
                '"""',
                "import network",
                '"""',
                "from .topics import x",
            )
        )
        self.assertEqual(
            scan_imports(text),
            [(1, "time"), (2, "struct"), (2, "os"), (3, "socket"), (6, "utime"), (7, "select")],
        )

    def test_full_names_for_layers(self):
        text = "from common import compat, mqtt as m\nfrom common.broker.topics import x\nimport common.store.kvlog\n"
        self.assertEqual(
            scan_modules(text),
            [(1, "common.compat"), (1, "common.mqtt"), (2, "common.broker.topics"), (3, "common.store.kvlog")],
        )

    def test_poison_blocks_both_forms(self):
        sys.modules["siskin_poisoned_probe"] = _Poison("siskin_poisoned_probe")
        try:
            with self.assertRaises(ImportError):
                from siskin_poisoned_probe import anything  # noqa: F401
            import siskin_poisoned_probe

            self.assertIsInstance(siskin_poisoned_probe, _Poison)
        finally:
            del sys.modules["siskin_poisoned_probe"]
