# Runs first on a board, before main.py. Kept minimal: a failure here leaves
# the board without its REPL. No Wi-Fi here (main.py brings it up, with
# backoff and the watchdog fed).

import gc

try:
    import esp  # ESP32: no ROM debug chatter on the UART the REPL uses

    esp.osdebug(None)
except (ImportError, AttributeError):
    pass

gc.collect()
