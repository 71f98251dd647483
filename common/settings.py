# Every limit and switch of the broker, with its default, in one place.
#
# A board file (boards/*.json, boards/*.toml) overrides any of these by name;
# an unknown name is an error, so a typo in a config file is caught at start-up
# rather than silently ignored. docs/limits.md lists them with the answer the
# broker gives when each one is reached.

from common.topics import validate_topic_filter

# (name, default, kind) — kind is "int", "bool", "str" or "list".
FIELDS = (
    # -- connections and sessions --
    ("max_connections", 1000, "int"),  # beyond it: CONNACK 0x03 / 0x97
    ("max_sessions", 2000, "int"),  # live + orphaned persistent sessions
    ("connect_timeout", 10, "int"),  # s to complete CONNECT after accept
    ("max_client_id_length", 128, "int"),  # CONNACK 0x02 / 0x85 beyond it
    ("allow_mqtt31", True, "bool"),  # accept protocol level 3 ("MQIsdp")
    ("max_keepalive", 0, "int"),  # cap on a client's keep-alive (s), 0 = none
    ("persistent_session_expiry", 0, "int"),  # s an orphaned 3.1.1 session lives, 0 = forever
    ("max_session_expiry", 0xFFFFFFFF, "int"),  # cap on a v5 Session Expiry Interval
    # -- subscriptions and topics --
    ("max_subscriptions", 10000, "int"),  # total subscription slots
    ("max_subscriptions_per_client", 100, "int"),  # SUBACK 0x80 / 0x97 beyond it
    ("max_topic_levels", 32, "int"),
    ("max_topic_length", 1024, "int"),  # bytes of UTF-8
    ("deny_subscribe", [], "list"),  # filters refused with SUBACK 0x80 / 0x87
    ("match_cache_bytes", 65536, "int"),  # topic -> subscribers cache, 0 = off
    # -- messages --
    ("max_packet_size", 1048576, "int"),  # bytes, whole packet; 0x95 beyond it
    ("max_messages", 20000, "int"),  # message slabs held at once
    ("max_queued_messages", 1000, "int"),  # per session; dropped and counted beyond
    ("max_queued_bytes", 4194304, "int"),  # payload bytes queued per session
    ("max_inflight", 16, "int"),  # unacknowledged QoS 1/2 PUBLISHes to one client
    ("max_inflight_in", 64, "int"),  # QoS 2 ids awaiting PUBREL from one client (v5 Receive Maximum)
    ("max_out_buffer", 262144, "int"),  # bytes waiting for a slow reader before QoS 0 drops
    ("queue_qos0_offline", False, "bool"),  # queue QoS 0 for offline persistent sessions
    ("max_retained", 10000, "int"),  # retained messages; beyond it new ones are dropped and counted
    ("max_retained_bytes", 16777216, "int"),
    # -- v5 capabilities announced in CONNACK --
    ("maximum_qos", 2, "int"),
    ("retain_available", True, "bool"),
    ("wildcard_subscriptions", True, "bool"),
    ("subscription_identifiers", True, "bool"),
    ("shared_subscriptions", True, "bool"),
    ("topic_alias_maximum", 16, "int"),  # inbound aliases a v5 client may use
    ("response_information", "", "str"),  # answer to Request Response Information
    # -- authentication --
    # v5 enhanced authentication: lines "user:salt:iterations:StoredKey:ServerKey"
    # (base64) made by `python -m cpython_host scram-user`; empty = method off.
    ("scram_users", [], "list"),
    # -- persistence (used when the shell gives the broker a store) --
    # "always": every acknowledged QoS 1/2 message is durable before its ack
    # leaves; "batch": the shell syncs every store_sync_ms, so a crash may
    # lose the acks of that last window.
    ("store_sync", "always", "str"),
    ("store_sync_ms", 100, "int"),
    # -- housekeeping --
    ("sys_interval", 10, "int"),  # s between $SYS updates, 0 = off
    ("prealloc", False, "bool"),  # create every pool object at start-up (boards)
)


class Settings:
    """The broker's limits; attributes named as in FIELDS."""

    def __init__(self, overrides=None):
        for name, default, kind in FIELDS:
            setattr(self, name, list(default) if kind == "list" else default)
        if overrides:
            self.update(overrides)

    def update(self, overrides):
        """Apply a dict of overrides; raise ValueError naming a bad key or value."""
        kinds = {}
        for name, _default, kind in FIELDS:
            kinds[name] = kind
        for name in overrides:
            kind = kinds.get(name)
            if kind is None:
                raise ValueError("unknown setting %r" % name)
            value = overrides[name]
            if kind == "bool":
                ok = value is True or value is False
            elif kind == "int":
                ok = isinstance(value, int) and value is not True and value is not False and value >= 0
            elif kind == "str":
                ok = isinstance(value, str)
            else:
                ok = isinstance(value, list)
            if not ok:
                raise ValueError("setting %r wants a %s, got %r" % (name, kind, value))
            setattr(self, name, list(value) if kind == "list" else value)
        if self.max_inflight < 1 or self.max_inflight > 65535:
            raise ValueError("max_inflight must be 1..65535")
        if self.max_inflight_in < 1 or self.max_inflight_in > 65535:
            raise ValueError("max_inflight_in must be 1..65535")
        if self.max_packet_size < 16:
            raise ValueError("max_packet_size must be at least 16 bytes")
        if self.store_sync not in ("always", "batch"):
            raise ValueError("store_sync must be 'always' or 'batch'")
        if self.maximum_qos > 2:
            raise ValueError("maximum_qos must be 0, 1 or 2")
        if self.topic_alias_maximum > 65535:
            raise ValueError("topic_alias_maximum must be 0..65535")
        for flt in self.deny_subscribe:
            if not isinstance(flt, str) or validate_topic_filter(flt, 0, 0):
                raise ValueError("deny_subscribe entry %r is not a valid topic filter" % (flt,))
