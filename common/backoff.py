"""The back-off between attempts, one policy for every reconnecting part.

The delay doubles per failure in a row from `min_ms` up to `max_ms`; half of
it is random (jitter from the shell's entropy), so that many boards cut off
by one outage do not all come back in the same millisecond. Used by the
bridge's reconnects (common/bridge/bridge.py) and the PPP uplink's redials
(common/uplink/link.py).
"""


def backoff_ms(min_ms, max_ms, failures, entropy):
    """ms to wait before the next attempt after `failures` failures in a row
    (0: the first retry waits `min_ms`, of which a random half)."""
    delay = min_ms << (failures if failures < 16 else 16)
    if delay > max_ms:
        delay = max_ms
    half = delay >> 1
    r = entropy(2)
    return half + ((r[0] << 8) | r[1]) * half // 65535
