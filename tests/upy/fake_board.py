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
# The dead radio answers as the CYW43 driver does (MicroPython's
# network_cyw43.c, cyw43-driver): every call that starts the chip prints
# "[FAKE CYW43] Failed to start CYW43" (the tests count them): active(True),
# config() on an active interface (down and up: twice), disconnect() and
# active(False); active() answers MicroPython's own flag, not the chip's
# state, and connect() raises EPERM.
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
        self.up = False  # the interface is up in the driver
        self.flag = False  # what active() answers (MicroPython's own flag)

    def _start_chip(self):
        if SPEC["radio"] != "dead":
            return True
        print("[FAKE CYW43] Failed to start CYW43")
        return False

    def active(self, on=None):
        if on is None:
            return self.flag
        if on:
            self.up = self._start_chip()
        elif not self.up:
            self._start_chip()  # (leaving talks to the chip, which starts it)
        else:
            self.up = False
        self.flag = bool(on)
        return None

    def config(self, **kw):
        if self.flag:
            self.active(False)
            self.active(True)

    def ifconfig(self):
        return ("192.168.4.1" if self.up else "0.0.0.0", "255.255.255.0", "0.0.0.0", "0.0.0.0")

    def isconnected(self):
        return False

    def connect(self, ssid, password):
        if not self.up:
            raise OSError(1)  # EPERM, as the CYW43 driver answers

    def disconnect(self):
        if not self.up:
            self._start_chip()


def wlan(which, interfaces={}):  # noqa: B006 (one object per interface, as in MicroPython)
    if which not in interfaces:
        interfaces[which] = FakeWLAN(which)
    return interfaces[which]


class FakeNetwork:
    STA_IF = 0
    AP_IF = 1
    WLAN = wlan

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
