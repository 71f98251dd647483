# The firmware under the MicroPython unix port with a board's parts stood in
# for (tests/host/test_firmware_startup.py): a machine.WDT that says when it
# is started, and a `network` whose radio starts or fails, chosen by the
# environment variable SISKIN_FAKE_BOARD (a JSON object):
#
#   {"wdt": true}              machine.WDT prints "FAKE WDT started <ms>"
#   {"radio": "dead"|"ok"}     network.WLAN: the radio fails to start (as the
#                              CYW43 in rp2040js: interfaces stay inactive,
#                              address 0.0.0.0), or comes up at 192.168.4.1
#
#   micropython tests/upy/fake_board.py --config siskin.json --port N
#
# Stand-ins go into sys.modules before the firmware imports them; the unix
# port's own `machine` has neither WDT nor reset, so the firmware still takes
# the unix port's stop (exit 2) and reset (exit 1).

import json
import os
import sys

SPEC = json.loads(os.getenv("SISKIN_FAKE_BOARD") or "{}")


class FakeWDT:
    def __init__(self, timeout):
        print("FAKE WDT started %d" % timeout)

    def feed(self):
        pass


class FakeMachine:
    WDT = FakeWDT


class FakeWLAN:
    def __init__(self, which):
        self.which = which
        self.up = False

    def active(self, on=None):
        if on is None:
            return self.up
        if SPEC["radio"] == "dead" and on:
            print("[FAKE CYW43] Failed to start CYW43")
        else:
            self.up = bool(on)
        return None

    def config(self, **kw):
        pass

    def ifconfig(self):
        return ("192.168.4.1" if self.up else "0.0.0.0", "255.255.255.0", "0.0.0.0", "0.0.0.0")

    def isconnected(self):
        return False

    def connect(self, ssid, password):
        pass

    def disconnect(self):
        pass


class FakeNetwork:
    STA_IF = 0
    AP_IF = 1
    WLAN = FakeWLAN

    @staticmethod
    def hostname(name):
        pass


if SPEC.get("wdt"):
    sys.modules["machine"] = FakeMachine
if "radio" in SPEC:
    sys.modules["network"] = FakeNetwork

here = __file__
ROOT = here[: here.rfind("/tests/upy/")] if "/tests/upy/" in here else "../.."
sys.path.insert(0, ROOT)

from firmware import app  # noqa: E402

app.run(root=ROOT)
