# The frozen set of MicroPython's RPI_PICO_W (asyncio, the network bundle,
# aioble); firmware/manifest.py adds Siskin to it.
include("$(PORT_DIR)/boards/RPI_PICO_W/manifest.py")  # noqa: F821  (defined by the manifest reader)
