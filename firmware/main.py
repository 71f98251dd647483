# Entry point. On a board MicroPython runs /main.py after /boot.py; tools/build
# puts this file there, next to common/ and firmware/ (as .mpy) and boards/.
# On the unix port (what the tests run):
#
#   micropython firmware/main.py --config path/to/siskin.json [--port N]
#
# It only finds the directory holding common/ and firmware/ and hands over to
# firmware/app.py, which does the work (and restarts the board on a fatal
# error).

import sys


def _root():
    here = globals().get("__file__", "main.py")
    i = here.rfind("/")
    d = here[:i] if i >= 0 else ""
    if d == "firmware" or d.endswith("/firmware"):
        d = d[: -len("firmware")].rstrip("/") or "."  # running from the source tree
    return d


ROOT = _root()
if ROOT and ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from firmware import app  # noqa: E402

app.run(root=ROOT)
