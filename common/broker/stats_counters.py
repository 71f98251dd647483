# STATS_COUNTERS: the names of the broker's counters (stats.Stats has one
# int attribute per name), in a stable order: sys_topics.py snapshot()
# ($SYS, and the host's metrics.py and status.py through Broker.snapshot())
# reads them in it. A module of its own because a board reads it only to
# make the Stats at start-up (and with $SYS): it unloads it after start-up
# (firmware/startup_only.py), so that the table does not stay in its heap.

STATS_COUNTERS = (
    "connections_total",
    "clients_maximum",
    "messages_received",
    "messages_sent",
    "bytes_received",
    "bytes_sent",
    "publish_bytes_received",  # PUBLISH payload bytes from clients
    "publish_bytes_sent",  # PUBLISH payload bytes to clients
    "dropped_qos0",  # QoS 0 dropped for a slow or offline client
    "dropped_queue_full",  # dropped: a session's queue was full
    "dropped_too_large",  # larger than a v5 client's Maximum Packet Size
    "dropped_no_slab",  # the message pool was exhausted
    "dropped_retained",  # retained store full
    "refused_queue_full",  # publishes refused: a subscriber's queue was full (queue_full = refuse)
    "dropped_queue_total",  # dropped: all queues together were full (max_queued_total_bytes)
    "refused_queue_total",  # publishes refused: all queues together were full
    "expired",  # v5 Message Expiry reached before delivery
    "refused_connections",
    "login_failed",  # logins refused for a bad user name or password (CONNECT, the host's HTTP)
    "denied_publish",  # PUBLISHes the ACL refused
    "denied_subscribe",  # filters the ACL refused (or removed after a change)
    "denied_delivery",  # messages not sent: the ACL does not let their client read them
    "closed_replay_stalled",  # closed: a retained replay's output did not drain (replay_stall_timeout)
    "denied_takeover",  # CONNECTs refused: their client id's session belongs to another user
    "tls_failed",  # TLS connections refused before MQTT: a failed or stalled handshake (the shells count)
    "websocket_refused",  # host WebSocket listeners: upgrades refused, connections closed for bad frames
    "closed_out_of_memory",  # closed: handling their packet ran out of heap (MemoryError; boards)
    "closed_token_expired",  # closed: their JWT expired during the session (jwt_auth.py)
    "auth_offline_allowed",  # let in on a cached allow while the auth hook was unreachable
    "auth_offline_refused",  # refused: the auth hook was unreachable and nothing cached allowed them
    "auth_offline_checks_allowed",  # PUBLISH/SUBSCRIBE checks (acl_url) allowed on a cached allow, hook unreachable
    "auth_offline_checks_refused",  # PUBLISH/SUBSCRIBE checks refused: hook unreachable, no allow within offline_grace
    # Rate limits (ratelimit.py): clients held back (not read) for a while, by cause; closed.
    "rate_held_messages",
    "rate_held_bytes",
    "rate_held_subscribes",
    "rate_held_user_messages",
    "rate_held_user_bytes",
    "rate_held_user_subscribes",
    "rate_held_listener_messages",
    "rate_held_listener_bytes",
    "rate_held_listener_subscribes",
    "closed_rate_limited",
    "refused_connect_rate",  # CONNECTs refused: over rate_connects from their source address (connect_rate.py)
    # MQTT-SN (common/mqttsn/gateway.py): refusals, by cause (docs/mqtt-sn.md)
    "sn_malformed",  # datagrams the codec refused (length, truncation, type, flags, UTF-8)
    "sn_unknown_clients",  # datagrams from an address with no connection: answered with DISCONNECT
    "sn_refused_connects",  # CONNECTs refused: max SN clients, max_connections, the broker's CONNACK
    "sn_refused_subscriptions",  # SUBSCRIBEs the broker refused (ACL, limits): SUBACK 0x03
    "sn_topic_ids_refused",  # topic ids not given: a client's table full (0x01), an invalid name (0x02)
    "sn_unknown_topic_ids",  # PUBLISH/SUBSCRIBE naming an id the client has not got: 0x02
    "sn_keep_alive_lost",  # SN clients silent for 1.5 x their Duration: lost, will published
    "sn_retries_exhausted",  # SN clients that acked no resend of a PUBLISH/REGISTER (§6.13): lost, will published
    "sn_wrong_state",  # SN messages the client's state does not take (asleep: not PINGREQ, CONNECT, DISCONNECT, a will update)
    "sn_too_large",  # datagrams over the listener's max_packet_size, both ways: dropped
    "sn_unsealed",  # datagrams not sealed to a keyed listener (only SEARCHGW may be): dropped
    "sn_bad_seal",  # envelopes that do not open: unknown key id, tag mismatch, truncated: dropped
    "sn_replayed",  # envelopes whose counter was seen or is below the 64-datagram window: dropped
    "sn_challenged",  # envelopes under no challenge the gateway holds: dropped, answered with a new one
    "sn_wrong_key",  # CONNECTs (CONNACK 0x03) or datagrams whose client id is not their key's: dropped
)
