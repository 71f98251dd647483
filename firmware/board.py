# What only a board has, behind small functions, for after start-up too:
# whether there is a network, reset, and the room for TLS. Each one detects
# what the running port offers (feature detection: `network` and
# `machine.reset` are missing on the unix port), so the same main.py runs on
# a board and on the unix port that the tests use. The Wi-Fi and the
# watchdog, needed only to start, are in firmware/startup.py (unloaded after
# start-up).

import time


def has_network():
    try:
        import network  # noqa: F401
    except ImportError:
        return False
    return True


def reset(log):
    """Restart the board (persisted state is on flash); exit 1 on the unix port."""
    try:
        import machine

        board_reset = machine.reset
    except (ImportError, AttributeError):
        board_reset = None
    if board_reset is None:
        import sys

        log.log(40, "no machine.reset on this port: exiting")
        sys.exit(1)
    time.sleep_ms(1000)  # let the log line leave the UART
    board_reset()


def tls_room(per_client, biggest, most):
    """(TLS clients whose mbedTLS buffers fit now, at most `most`; the heap's name).

    On the ESP32 MicroPython uses ESP-IDF's mbedTLS, which allocates from
    the IDF heap (the one the split MicroPython heap also grows into): the
    free bytes of its regions are divided. On the Pico W (and every port with
    MICROPY_MBEDTLS_CONFIG_BARE_METAL) mbedTLS allocates from the MicroPython
    heap (m_tracked_calloc), where what counts is whether its blocks (the
    largest `biggest` bytes: the 16 KB input buffer) find room among the
    pools: tried with real allocations, freed at once. The unix port's
    mbedTLS uses malloc; its capped MicroPython heap stands in for a Pico W's.
    """
    import gc

    gc.collect()
    try:
        import esp32

        room = 0
        for _total, free, largest, _low in esp32.idf_heap_info(esp32.HEAP_DATA):
            if largest >= biggest:  # a region without a block for the input buffer holds none
                room += free // per_client
        return min(room, most), "ESP-IDF heap"
    except (ImportError, AttributeError):
        pass
    blocks = []
    try:
        while len(blocks) < 2 * most:
            blocks.append(bytearray(biggest))
            blocks.append(bytearray(per_client - biggest))
    except MemoryError:
        pass
    room = len(blocks) // 2
    blocks = None
    gc.collect()
    return room, "MicroPython heap"
