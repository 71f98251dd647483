"""The PPP uplink's policy, sans-I/O: its settings (settings.py), the modem's
dial-up script (dialscript.py) and the supervisor that dials, watches and
redials with back-off (link.py). firmware/uplink.py drives them with the
board's UART and network.PPP.

Imports common.compat, common.backoff and common.broker.settings."""
