"""The MQTT-SN gateway's timers, run by Gateway.tick(): keep-alive (§6.11:
a client silent for 1.5 x the Duration of its CONNECT is lost, its will
published), sleep expiry (§6.14: asleep past its Duration: lost, its will
published through one more connection), retransmission and ADVERTISE.

Retransmission (§6.13): the gateway's PUBLISH QoS 1/2, PUBREL and
REGISTER to a client wait in `SnClient.unacked` for their ack; `run()`
sends the same datagram again (PUBLISH with DUP set in place) every
`retry_interval` s, at most `max_retries` times, then the client is lost.

ADVERTISE (§6.1): the gateway's datagram goes to `advertise_to` every
`advertise_interval` s, the first at the first tick.
"""

from common.compat import ticks_deadline, ticks_diff
from common.mqttsn import consts as S
from common.mqttsn.sn_client import ACTIVE, ASLEEP, AWAKE, EXPIRING, KEEP_ALIVE_GRACE


def run(gw):
    """Run what is due on `gw`'s clients; its next deadline (ms ticks, 0 none)."""
    ms = gw.ticks_ms()
    due = 0
    if gw.advertisement is not None:
        if ticks_diff(ms, gw.advertise_due) >= 0:
            gw.send_plain(gw.settings.advertise_to, gw.advertisement)
            gw.advertise_due = ticks_deadline(ms, gw.settings.advertise_interval * 1000)
        due = gw.advertise_due
    for addr in list(gw.clients):
        c = gw.clients[addr]
        if c.unacked and (c.state == ACTIVE or c.state == AWAKE):
            d = _resend(gw, c, ms, due)
            if d is False:
                gw.count("sn_retries_exhausted")
                why = "MQTT-SN client %s: no ack after %d resends: lost"
                gw.log(30, why, (c.client_id, gw.settings.max_retries))
                gw._end(c, True)
                continue
            due = d
        if c.state == ASLEEP:
            deadline = c.sleep_until
        elif c.duration and c.state != EXPIRING:
            deadline = ticks_deadline(c.heard_at, int(c.duration * KEEP_ALIVE_GRACE * 1000))
        else:
            continue
        if ticks_diff(ms, deadline) < 0:
            if not due or ticks_diff(deadline, due) < 0:
                due = deadline
        elif c.state == ASLEEP:
            # §6.14: asleep past its Duration: lost. Its will goes out
            # through the broker, so connect once more with it, then drop.
            gw.log(30, "MQTT-SN client %s asleep past its Duration: lost", (c.client_id,))
            c.state = EXPIRING
            if c.will is None:
                gw.expired.append(c)
            else:
                c._open(c.will, ms, False)
        else:
            gw.count("sn_keep_alive_lost")
            gw.log(30, "MQTT-SN client %s silent for %d s: lost", (c.client_id, c.duration))
            gw._end(c, True)
    gw.pump()
    return due


def _resend(gw, c, ms, due):
    """§6.13: resend `c`'s unacknowledged datagrams that are due; False when one
    was resent max_retries times (the client is lost). Else the next deadline."""
    retry_ms = gw.settings.retry_interval * 1000
    for e in c.unacked:
        if ticks_diff(ms, e[3]) >= 0:
            if e[4] >= gw.settings.max_retries:
                return False
            e[4] += 1
            e[3] = ticks_deadline(ms, retry_ms)
            data = e[2]
            at = 3 if data[0] == 1 else 1  # the MsgType octet (3-octet length form, §5.2.1)
            if data[at] == S.PUBLISH:
                data[at + 1] |= S.FLAG_DUP  # §5.3.4: a resent PUBLISH
            gw.out.append((c.addr, data))
        if not due or ticks_diff(e[3], due) < 0:
            due = e[3]
    return due
