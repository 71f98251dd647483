# Siskin's Pico W (make firmware BOARD=rp2040_picow; tools/image.py): MicroPython
# v1.28.0's RPI_PICO_W with lwIP's PPP on (network.PPP over a modem's UART,
# docs/boards.md "PPP uplink").
include(${MICROPY_PORT_DIR}/boards/RPI_PICO_W/mpconfigboard.cmake)
set(MICROPY_BOARD_PINS ${MICROPY_PORT_DIR}/boards/RPI_PICO_W/pins.csv)
# MicroPython 1.28's lwIP under network.PPP, fixed (../lwip_ppp/: lwip_lock.c, tcp_send.c).
set(USER_C_MODULES ${CMAKE_CURRENT_LIST_DIR}/../lwip_ppp/micropython.cmake)
