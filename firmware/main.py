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


def _user_main():
    # Frozen into an image (firmware/manifest.py), this file runs INSTEAD of a
    # /main.py on the file system: MicroPython looks for a frozen main.py
    # first. So a frozen copy runs the file system's main.py when there is
    # one: that is how a user replaces the broker on a frozen image. Run from
    # the file system, __file__ is "main.py" (a frozen main.py has none of its
    # own: it sees boot.py's, or nothing); the unix port never runs it frozen.
    if sys.platform not in ("rp2", "esp32") or globals().get("__file__") == "main.py":
        return None
    try:
        with open("main.py") as f:
            return f.read()
    except OSError:
        return None


def _root():
    here = globals().get("__file__", "main.py")
    i = here.rfind("/")
    d = here[:i] if i >= 0 else ""
    if d == "firmware" or d.endswith("/firmware"):
        d = d[: -len("firmware")].rstrip("/") or "."  # running from the source tree
    return d


_source = _user_main()
if _source is not None:
    exec(_source, {"__name__": "__main__", "__file__": "main.py"})
else:
    ROOT = _root()
    if ROOT and ROOT not in sys.path:
        sys.path.insert(0, ROOT)

    from firmware import app

    app.run(root=ROOT)
