# Freeze manifest: a MicroPython firmware image with Siskin frozen into flash.
# NOT RUN HERE (no ESP-IDF or pico-sdk in this environment): docs/boards.md
# has the procedure and says what only a real build can confirm.
#
# Frozen modules run from flash: their bytecode takes no heap, which on a
# generic ESP32 (~110 KB heap) is what makes the broker fit at all (the
# bytecode of the core and shell is ~88 KB of heap when loaded from .mpy:
# docs/boards.md, measured).
#
#   cd micropython/ports/esp32
#   make BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/siskin/firmware/manifest.py
#   cd micropython/ports/rp2
#   make BOARD=RPI_PICO_W FROZEN_MANIFEST=/path/to/siskin/firmware/manifest.py
#
# MicroPython's build reads this file (tools/manifestfile.py); paths are
# relative to this directory. /siskin.json and /boards/<board>.json stay on
# the file system so they can change without a new image.

try:
    # Boards with a manifest of their own (RPI_PICO_W: the port's modules
    # plus the network helpers); FROZEN_MANIFEST replaces it, so include it.
    include("$(BOARD_DIR)/manifest.py")  # noqa: F821  (defined by the manifest reader)
except Exception:
    # ESP32_GENERIC has none: the port's (asyncio and friends).
    include("$(PORT_DIR)/boards/manifest.py")  # noqa: F821

# The core and the firmware shell. opt=1 drops asserts (the core never
# asserts on received data) and keeps line numbers for tracebacks. opt=3
# (no line numbers) was measured: 6 KB less bytecode (82,136 vs 88,206 B),
# the same routing speed; frozen bytecode lives in flash, so those 6 KB would
# save flash only, not heap, and a crash report from the field would lose its
# line numbers. tools/build.py's .mpy files, which a board loads into RAM,
# use -O3.
package("common", base_path="..", opt=1)  # noqa: F821
package("firmware", base_path="..", opt=1)  # noqa: F821
# A frozen main.py runs at boot when the file system has none.
module("main.py", opt=1)  # noqa: F821
