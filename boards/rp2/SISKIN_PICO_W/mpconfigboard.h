// Siskin's Pico W: MicroPython's RPI_PICO_W (same board name, so the
// firmware recognises it) with network.PPP (lwIP's PPP, PAP and CHAP).
#include "boards/RPI_PICO_W/mpconfigboard.h"
#define MICROPY_PY_NETWORK_PPP_LWIP             (1)

// The file system at the end of the 2 MB flash (RPI_PICO_W's size); the
// image before it (tools/image.py stops when they overlap, and
// tools/emu/fsimage.py reads this line).
#undef MICROPY_HW_FLASH_STORAGE_BYTES
#define MICROPY_HW_FLASH_STORAGE_BYTES          (848 * 1024)
