# The $SYS topics: broker statistics as retained QoS 0 messages.
#
# Every `sys_interval` seconds (0 = off) the driver (common/driver.py)
# publishes, through broker.publish(), the topics below under `$SYS/broker/`,
# on the host and on a board alike. They are retained, so a client that
# subscribes to `$SYS/#` gets the latest values at once. Only the broker
# publishes there: the core refuses a client's PUBLISH into `$SYS/`.
#
# The values come from snapshot() (broker.snapshot()), the core's public
# counters, plus the heap figure the shell measures (the host's resident set
# size, a board's allocated heap), when it gives one. snapshot() is here, not
# in broker.py, so that a board without $SYS does not hold its code.

from common import VERSION
from common.broker.connection import CONNECTED
from common.broker.stats_counters import STATS_COUNTERS

PREFIX = "$SYS/broker/"



def snapshot(broker):
    """The public counters ($SYS, metrics): a new dict of name -> int.

    Counts of what is live now (connected clients, sessions, subscriptions,
    retained messages, message slabs in use, bytes of all queues as
    max_queued_total_bytes counts them) and every Stats counter, the
    message counters also by QoS (messages_received_qos0 ...).
    """
    connected = 0
    for conn in broker.connections.by_id:
        if conn.state == CONNECTED:
            connected += 1
    counts = {}
    st = broker.stats
    for name in STATS_COUNTERS:
        counts[name] = getattr(st, name)
    for qos in range(3):
        counts["messages_received_qos%d" % qos] = st.received_by_qos[qos]
        counts["messages_sent_qos%d" % qos] = st.sent_by_qos[qos]
    counts["connected"] = connected
    counts["sessions"] = broker.sessions.count()
    counts["subscriptions"] = broker.sessions.sub_pool.in_use
    counts["retained"] = broker.routing.retained.count()
    counts["messages"] = broker.routing.messages.in_use()
    counts["queued_total"] = broker.routing.queued_total
    counts["stored_bytes"] = broker.routing.messages.payload_bytes
    counts["started"] = broker.started
    spb = broker.sparkplug
    counts["refused_sparkplug"] = 0 if spb is None else spb.refused
    return counts


# messages/dropped/<name>: snapshot key. messages/dropped is their sum.
DROP_COUNTERS = (
    ("qos0", "dropped_qos0"),  # QoS 0 for a slow reader over max_out_buffer, or an offline session
    ("queue_full", "dropped_queue_full"),  # a session's queue (count or bytes) was full
    ("queue_total", "dropped_queue_total"),  # all queues together were full (max_queued_total_bytes)
    ("too_large", "dropped_too_large"),  # above a v5 client's Maximum Packet Size
    ("no_slab", "dropped_no_slab"),  # the message pool (max_messages) was exhausted
    ("retained", "dropped_retained"),  # the retained store was full: not kept
)

# THE table of the public figures: (topic suffix under $SYS/broker/, snapshot
# key), in publishing order. $SYS is published from it (sys_values) and the
# host's /metrics is generated from it (cpython_host/operations/metrics.py), so neither
# can show a figure the other lacks.
SYS_FIGURES = (
    ("clients/connected", "connected"),
    ("clients/total", "sessions"),
    ("clients/maximum", "clients_maximum"),
    ("clients/refused", "refused_connections"),
    ("connections/total", "connections_total"),
    ("messages/received", "messages_received"),
    ("messages/sent", "messages_sent"),
) + tuple([("messages/dropped/" + name, key) for name, key in DROP_COUNTERS]) + (
    ("messages/refused/queue_full", "refused_queue_full"),
    ("clients/closed/replay_stalled", "closed_replay_stalled"),
    ("messages/refused/queue_total", "refused_queue_total"),
    ("messages/refused/sparkplug", "refused_sparkplug"),  # sparkplug_aware: $sparkplug/certificates/, malformed spBv1.0/
    ("messages/expired", "expired"),
    ("messages/denied/publish", "denied_publish"),  # PUBLISHes and wills the ACL refused
    ("messages/denied/delivery", "denied_delivery"),  # messages not sent: their client may not read them
    ("subscriptions/denied", "denied_subscribe"),  # filters the ACL refused or removed
    ("clients/login_failed", "login_failed"),  # logins with a bad user name or password (CONNECT, host HTTP)
    ("clients/denied_takeover", "denied_takeover"),  # CONNECTs for another user's session (client id)
    ("clients/tls_failed", "tls_failed"),  # TLS handshakes that failed or stalled (no MQTT reached the core)
    ("clients/websocket_refused", "websocket_refused"),  # WebSocket upgrades refused, bad frames (host)
    ("clients/closed/out_of_memory", "closed_out_of_memory"),  # their packet found no heap (boards)
    ("clients/closed/token_expired", "closed_token_expired"),  # their JWT expired during the session
    ("clients/auth_offline/allowed", "auth_offline_allowed"),  # auth hook unreachable: let in on a cached allow
    ("clients/auth_offline/refused", "auth_offline_refused"),  # auth hook unreachable: refused, nothing cached
    ("clients/auth_offline/checks_allowed", "auth_offline_checks_allowed"),  # acl_url unreachable: cached allow
    ("clients/auth_offline/checks_refused", "auth_offline_checks_refused"),  # acl_url unreachable: refused
    ("clients/rate_held/messages", "rate_held_messages"),  # clients held back (not read): over rate_messages
    ("clients/rate_held/bytes", "rate_held_bytes"),  # over rate_bytes
    ("clients/rate_held/subscribes", "rate_held_subscribes"),  # over rate_subscribes
    ("clients/rate_held/user_messages", "rate_held_user_messages"),  # over user_rate_messages (the user's shared bucket)
    ("clients/rate_held/user_bytes", "rate_held_user_bytes"),
    ("clients/rate_held/user_subscribes", "rate_held_user_subscribes"),
    ("clients/rate_held/listener_messages", "rate_held_listener_messages"),  # over listener_rate_messages
    ("clients/rate_held/listener_bytes", "rate_held_listener_bytes"),
    ("clients/rate_held/listener_subscribes", "rate_held_listener_subscribes"),
    ("clients/closed/rate_limited", "closed_rate_limited"),  # over their rates for rate_grace s: closed (0x96)
    ("clients/refused/connect_rate", "refused_connect_rate"),  # CONNECTs over rate_connects per address (0x9F / 0x03)
    # MQTT-SN listeners (common/mqttsn/gateway.py): refusals by cause, docs/mqtt-sn.md
    ("mqtt-sn/refused/malformed", "sn_malformed"),
    ("mqtt-sn/refused/unknown_client", "sn_unknown_clients"),
    ("mqtt-sn/refused/connect", "sn_refused_connects"),
    ("mqtt-sn/refused/subscribe", "sn_refused_subscriptions"),
    ("mqtt-sn/refused/topic_ids", "sn_topic_ids_refused"),
    ("mqtt-sn/refused/unknown_topic_id", "sn_unknown_topic_ids"),
    ("mqtt-sn/refused/keep_alive", "sn_keep_alive_lost"),
    ("mqtt-sn/refused/retries", "sn_retries_exhausted"),
    ("mqtt-sn/refused/wrong_state", "sn_wrong_state"),
    ("mqtt-sn/refused/too_large", "sn_too_large"),
    ("mqtt-sn/refused/unsealed", "sn_unsealed"),
    ("mqtt-sn/refused/bad_seal", "sn_bad_seal"),
    ("mqtt-sn/refused/replayed", "sn_replayed"),
    ("mqtt-sn/refused/challenged", "sn_challenged"),
    ("mqtt-sn/refused/wrong_key", "sn_wrong_key"),
    ("bytes/received", "bytes_received"),
    ("bytes/sent", "bytes_sent"),
    ("publish/bytes/received", "publish_bytes_received"),  # PUBLISH payload bytes (Mosquitto's name)
    ("publish/bytes/sent", "publish_bytes_sent"),
    ("store/messages/bytes", "stored_bytes"),  # payload bytes of the messages held (Mosquitto's name)
    ("subscriptions/count", "subscriptions"),
    ("retained messages/count", "retained"),
)


# Mosquitto's names for figures Siskin has under its own (or computes), so that
# a dashboard or check written for Mosquitto's $SYS reads the same here:
# (Mosquitto's topic suffix, snapshot key). Not in /metrics (SYS_FIGURES has them).
MOSQUITTO_NAMES = (
    ("clients/active", "connected"),  # (deprecated in Mosquitto, still published)
    ("publish/messages/received", "messages_received"),  # PUBLISH packets, as messages/received here
    ("publish/messages/sent", "messages_sent"),
    ("messages/stored", "messages"),  # messages held (queued or retained), once each
    ("store/messages/count", "messages"),
)


def sys_values(snap, now, heap=None):
    """(topic suffix, text value) for every $SYS topic, in a stable order:
    the version, the uptime ("N seconds", as Mosquitto says it), the sum of
    the drops, then SYS_FIGURES, then Mosquitto's names (MOSQUITTO_NAMES,
    clients/inactive and /disconnected: the sessions whose client is away,
    publish/messages/dropped: the sum of the drops).

    `snap` is a broker.snapshot(); `heap` the shell's heap figure or None.
    """
    started = snap["started"]
    dropped = dropped_sum(snap)
    values = [
        ("version", "siskin " + VERSION),
        ("uptime", "%d seconds" % (now - (started if started is not None else now))),
        ("messages/dropped", str(dropped)),
    ]
    for suffix, key in SYS_FIGURES:
        values.append((suffix, str(snap[key])))
    for suffix, key in MOSQUITTO_NAMES:
        values.append((suffix, str(snap[key])))
    away = snap["sessions"] - snap["connected"]
    away = str(away if away > 0 else 0)
    values.append(("clients/inactive", away))
    values.append(("clients/disconnected", away))
    values.append(("publish/messages/dropped", str(dropped)))
    if heap is not None:
        values.append(("heap/current", str(heap)))
    return values


def dropped_sum(snap):
    """messages/dropped: the sum of the drops."""
    dropped = 0
    for _name, key in DROP_COUNTERS:
        dropped += snap[key]
    return dropped


def publish_sys(broker, now, heap=None):
    """Publish every $SYS topic as a retained QoS 0 message: sys_values, then
    Mosquitto's load/ averages (sys_load.py, kept in broker.sys_load)."""
    snap = broker.snapshot()
    load = broker.sys_load
    first = load is None
    if first:
        from common.broker.sys_load import Load

        load = broker.sys_load = Load(snap, dropped_sum(snap), now)
    else:
        load.update(snap, dropped_sum(snap), now)
    for suffix, text in sys_values(snap, now, heap) + load.values():
        broker.publish(PREFIX + suffix, text.encode(), 0, True, now)
    own = broker.routing.retained.own
    slabs = broker.settings.max_messages
    if first and own * 2 > slabs:
        # Each topic keeps its retained message: a slab the clients' messages
        # cannot have (a board's pool is small).
        broker.log(
            30,
            "$SYS: its %d retained topics hold %d of the %d message slabs (max_messages), which leaves %d"
            " for the clients' messages: raise max_messages, or set sys_interval 0 (docs/boards.md)",
            (own, own, slabs, slabs - own),
        )
