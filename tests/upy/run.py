# Run the core tests (tests/core/test_*.py) under MicroPython.
#
#   micropython -X heapsize=4M tests/upy/run.py [-v] [-k SUBSTRING]... [DIR]
#
# MicroPython has no unittest and no test discovery, so this lists DIR
# (default tests/core, relative to the repository root) with os.listdir,
# imports every test_*.py module as a package module (tests.core.test_x, the
# name pytest gives it), and runs every TestCase method through the shim in
# tests/upy/lib/unittest.py. A module that fails to import counts as one
# failure. Each failure is printed with sys.print_exception. The last line is
#
#   N passed, N failed, N skipped
#
# and the exit status is 1 on any failure, 5 when no test ran (as pytest).
# With -v every test is listed as "ok <id>" / "skip <id> : <reason>", which
# tests/host/test_micropython.py compares with what pytest collects.
#
# The same file runs on the 32-bit WebAssembly port: tools/wasm_run.mjs copies
# the tree into the port's in-memory file system and calls main(argv).

import gc
import os
import sys

RUNNER_TAIL = "tests/upy/run.py"


def _repo_root():
    here = __file__
    if here.endswith(RUNNER_TAIL):
        root = here[: -len(RUNNER_TAIL)].rstrip("/")
    else:  # run.py copied elsewhere: assume the current directory
        root = ""
    if not root.startswith("/"):
        cwd = os.getcwd().rstrip("/")
        root = cwd + "/" + root if root else cwd
    return root


def _setup_path(root):
    for p in (root + "/tests/upy/lib", root):
        if p not in sys.path:
            sys.path.insert(0, p)


def _small_int_bits():
    # A small int is an immediate value, so two equal ones parsed at run time
    # are identical objects; a big int is a fresh heap object each time.
    bits = 0
    for n in range(4, 70):
        text = str((1 << n) - 1)
        if int(text) is int(text):
            bits = n + 1  # n magnitude bits + sign
        else:
            break
    return bits


def describe_interpreter():
    impl = sys.implementation
    version = ".".join(str(v) for v in impl.version[:3])
    parts = [
        "impl=" + impl.name,
        "version=" + version,
        "platform=" + sys.platform,
        "maxsize=%d" % sys.maxsize,
        "smallint_bits=%d" % _small_int_bits(),
    ]
    try:
        gc.collect()
        parts.append("heap=%d" % (gc.mem_free() + gc.mem_alloc()))
    except AttributeError:  # CPython
        pass
    return "interpreter: " + " ".join(parts)


def _is_dir(path):
    try:
        return os.stat(path)[0] & 0x4000 != 0
    except OSError:
        return False


def _parse_args(argv):
    verbose = False
    keywords = []
    directory = "tests/core"
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-v":
            verbose = True
        elif arg == "-k":
            i += 1
            keywords.append(argv[i])
        elif arg.startswith("-"):
            raise ValueError("unknown option " + arg)
        else:
            directory = arg.rstrip("/")
        i += 1
    return verbose, keywords, directory


def _load_module(name):
    __import__(name)
    return sys.modules[name]


def main(argv):
    verbose, keywords, directory = _parse_args(argv)
    root = _repo_root()
    _setup_path(root)
    import unittest  # the shim in tests/upy/lib, first on sys.path now

    print(describe_interpreter())

    package = directory.replace("/", ".")
    path = root + "/" + directory
    if not _is_dir(path):
        print("no such test directory:", path)
        print("0 passed, 1 failed, 0 skipped")
        return 1
    files = [f for f in os.listdir(path) if f.startswith("test_") and f.endswith(".py")]
    files.sort()

    def selector(test_id):
        for k in keywords:
            if k not in test_id:
                return False
        return True

    result = unittest.TestResult(verbose)
    for filename in files:
        modname = package + "." + filename[:-3]
        gc.collect()
        try:
            module = _load_module(modname)
        except (Exception, SystemExit) as e:  # any import failure is a test failure
            print("ERROR importing", modname)
            result.add_failure(modname, e)
            continue
        for clsname, cls in unittest.find_test_classes(module):
            unittest.run_class(cls, result, modname, clsname, selector if keywords else None)
            gc.collect()

    print(result.summary())
    if result.failed:
        return 1
    if not result.passed and not result.skipped:
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
