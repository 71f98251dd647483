# Freeze manifest: a MicroPython firmware image with Siskin frozen into flash.
#
#   make firmware BOARD=rp2040_picow MICROPY_DIR=...   # dist/rp2040_picow/siskin-<version>.uf2
#   make firmware BOARD=unix32 MICROPY_DIR=...         # a 32-bit unix MicroPython, the same set frozen
#
# (tools/build.py --image runs MicroPython's own build with this file as
# FROZEN_MANIFEST; docs/boards.md has the variables, the versions and the
# untested ESP32 recipe.) MicroPython's build reads this file
# (tools/manifestfile.py); paths are relative to this directory.
#
# Frozen modules run from flash: their bytecode takes no heap, though their
# module dicts, functions and classes still do once imported (about 25 KB:
# docs/boards.md has the measured figure).
#
# What is frozen:
# - the port's own set (asyncio, network helpers), which FROZEN_MANIFEST
#   would otherwise replace: $(BOARD_DIR)/manifest.py (RPI_PICO_W; for the
#   unix32 build tools/build points BOARD_DIR at the unix "standard"
#   variant), else the port's boards/manifest.py (ESP32_GENERIC has none);
# - common/ and firmware/ as packages, without the entry points and this file;
# - main.py as the top-level main.py, so a freshly flashed board starts the
#   broker (with the access-point fallback of docs/boards.md) without any
#   file of ours on its file system. MicroPython runs a frozen main.py
#   instead of /main.py; ours hands over to a /main.py on the file system
#   when there is one (firmware/main.py), which is how a user replaces it.
# boot.py is not frozen: a frozen boot.py would likewise shadow the one the
# port writes to a new file system, and ours only quietens the ESP32's ROM log.
# /siskin.json and /boards/<board>.json stay on the file system so they can
# change without a new image (tools/deploy --settings).

import os

try:
    include("$(BOARD_DIR)/manifest.py")  # noqa: F821  (defined by the manifest reader)
except Exception:
    include("$(PORT_DIR)/boards/manifest.py")  # noqa: F821

# The core and the firmware shell. opt=1 drops asserts (the core never
# asserts on received data) and keeps line numbers for tracebacks. opt=3
# (no line numbers) was measured: 6 KB less bytecode (82,136 vs 88,206 B),
# the same routing speed; frozen bytecode lives in flash, so those 6 KB would
# save flash only, not heap, and a crash report from the field would lose its
# line numbers. tools/build.py's .mpy files, which a board loads into RAM,
# use -O3.
package("common", base_path="..", opt=1)  # noqa: F821
ENTRY_POINTS = ("main.py", "boot.py", "manifest.py")
package(  # noqa: F821
    "firmware",
    files=sorted(n for n in os.listdir(".") if n.endswith(".py") and n not in ENTRY_POINTS),
    base_path="..",
    opt=1,
)
module("main.py", opt=1)  # noqa: F821
