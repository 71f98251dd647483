# Siskin's plain Pico (make firmware BOARD=rp2040_pico; tools/image.py):
# MicroPython v1.28.0's RPI_PICO with lwIP, `network` and network.PPP: no
# radio, its only network a modem on a UART (docs/boards.md "PPP uplink").
include(${MICROPY_PORT_DIR}/boards/RPI_PICO/mpconfigboard.cmake)
set(MICROPY_BOARD_PINS ${MICROPY_PORT_DIR}/boards/RPI_PICO/pins.csv)
set(MICROPY_PY_LWIP ON)
# MicroPython 1.28's lwIP under network.PPP, fixed (../lwip_ppp/: lwip_lock.c, tcp_send.c).
set(USER_C_MODULES ${CMAKE_CURRENT_LIST_DIR}/../lwip_ppp/micropython.cmake)
