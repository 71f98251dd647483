# What only a board has, behind small functions, for after start-up too:
# whether there is a network, which board this is, and reset. Each one detects what the running
# port offers (feature detection: `network` and `machine.reset` are missing
# on the unix port), so the same main.py runs on a board and on the unix port
# that the tests use. The Wi-Fi and the watchdog, needed only to start, are
# in firmware/startup.py (unloaded after start-up); the room for TLS in
# firmware/tls.py (loaded only with TLS).

import time

# Seconds from 1970 to this port's epoch (2000 on boards that count from there).
EPOCH_OFFSET = 946684800 if time.gmtime(0)[0] == 2000 else 0


def wall():
    """Seconds since 1970 (the bridge's SAS tokens, JWT exp/nbf): the board
    must have its time set (NTP) for either."""
    return time.time() + EPOCH_OFFSET


def has_network():
    try:
        import network  # noqa: F401
    except ImportError:
        return False
    return True


def has_sockets():
    """False on a board without a network stack (a plain Pico): nothing to listen on."""
    try:
        import socket  # noqa: F401
    except ImportError:
        return False
    return True


def is_board():
    """True on a microcontroller (it has machine.reset), False on the unix port."""
    try:
        import machine
    except ImportError:
        return False
    return hasattr(machine, "reset")


def machine_name():
    """What the port says it runs on: 'Raspberry Pi Pico W with RP2040', ..."""
    import sys

    return getattr(sys.implementation, "_machine", sys.platform)


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
