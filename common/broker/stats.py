# The broker's counters: what $SYS, the metrics and the status page show of
# what happened. STATS_COUNTERS (stats_counters.py) names them in a stable
# order, and Stats is made from it, so a counter is added in one place
# (tests/core/test_output.py TestStats).
#
# They are never reset: on a 32-bit MicroPython port a counter past 2**30
# stops being a small int and each increment allocates a few bytes.


class Stats:
    """Counters for $SYS and metrics: one int attribute per STATS_COUNTERS
    name, and the message counters by QoS."""

    # (For mypy: the attributes __init__ sets by name.)
    connections_total: int
    clients_maximum: int
    messages_received: int
    messages_sent: int
    bytes_received: int
    bytes_sent: int
    publish_bytes_received: int
    publish_bytes_sent: int
    dropped_qos0: int
    dropped_queue_full: int
    dropped_too_large: int
    dropped_no_slab: int
    dropped_retained: int
    refused_queue_full: int
    dropped_queue_total: int
    refused_queue_total: int
    expired: int
    refused_connections: int
    login_failed: int
    denied_publish: int
    denied_subscribe: int
    denied_delivery: int
    closed_replay_stalled: int
    denied_takeover: int
    tls_failed: int
    websocket_refused: int
    closed_out_of_memory: int
    closed_token_expired: int
    auth_offline_allowed: int
    auth_offline_refused: int
    auth_offline_checks_allowed: int
    auth_offline_checks_refused: int
    rate_held_messages: int
    rate_held_bytes: int
    rate_held_subscribes: int
    rate_held_user_messages: int
    rate_held_user_bytes: int
    rate_held_user_subscribes: int
    rate_held_listener_messages: int
    rate_held_listener_bytes: int
    rate_held_listener_subscribes: int
    closed_rate_limited: int
    refused_connect_rate: int
    sn_malformed: int
    sn_unknown_clients: int
    sn_refused_connects: int
    sn_refused_subscriptions: int
    sn_topic_ids_refused: int
    sn_unknown_topic_ids: int
    sn_keep_alive_lost: int
    sn_retries_exhausted: int
    sn_wrong_state: int
    sn_too_large: int
    sn_unsealed: int
    sn_bad_seal: int
    sn_replayed: int
    sn_challenged: int
    sn_wrong_key: int

    def __init__(self):
        from common.broker.stats_counters import STATS_COUNTERS

        for name in STATS_COUNTERS:
            setattr(self, name, 0)
        # messages_received and messages_sent by QoS (index 0..2).
        self.received_by_qos = [0, 0, 0]
        self.sent_by_qos = [0, 0, 0]
        # The host's per-client figures (cpython_host/operations/client_figures.py, for
        # the status page): lists `received` and `sent` indexed by
        # connection id, `connected(cid)` when a CONNECT is accepted,
        # `detached(client_id)` when a session loses its client. None on a
        # board: a Connection holds no counter of its own (its RAM per client).
        self.by_client = None
