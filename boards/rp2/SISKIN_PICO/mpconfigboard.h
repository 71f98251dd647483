// Siskin's plain Pico: MicroPython's RPI_PICO (same board name, so the
// firmware recognises it) with lwIP and network.PPP (PAP and CHAP).
#include "boards/RPI_PICO/mpconfigboard.h"
#define MICROPY_PY_NETWORK                      (1)
#define MICROPY_PY_NETWORK_HOSTNAME_DEFAULT     "siskin"
#define MICROPY_PY_NETWORK_PPP_LWIP             (1)

// The file system at the end of the 2 MB flash: 1 MB instead of RPI_PICO's
// 1408 KB, whose 640 KB left for the image are too few for lwIP, PPP and
// Siskin frozen in (~730 KB). tools/image.py stops when the two overlap,
// and tools/emu/fsimage.py reads this line.
#undef MICROPY_HW_FLASH_STORAGE_BYTES
#define MICROPY_HW_FLASH_STORAGE_BYTES          (1024 * 1024)
