# Every limit and switch of the broker, with its default, in one place, and
# the one validator that every config file goes through.
#
# Theory of operation. A schema is a tuple of entries
#
#     (name, default, kind, lo, hi)      # and a comment: why the key exists
#
# kind is one of the K_* words below; lo/hi bound an integer or a number
# (hi None: no upper bound), and for K_CHOICE `lo` is the tuple of allowed
# strings. `check(where, obj, schema, listed_in)` takes a dict read from a
# file (TOML on the host, JSON on a board), refuses an unknown key (with a
# "did you mean" for a typo), a wrong type or an out-of-range value, and
# returns the checked values. The "did you mean" of a mistyped key lives in
# settings_hint.py, imported only when a file is refused. Every refusal is a ConfigError whose text names
# the file and table (`where`), the key, the bad value and what it wants:
#
#     site.toml: [limits]: max_inflight = 0: wants an integer 1..65535; fix the value.
#
# LIMITS is the broker's schema (limits.Limits); the shells declare their own
# listener/device tables in the same form (cpython_host/config.py,
# firmware/boardcfg.py) and check them here, so both shells accept, refuse
# and explain alike. docs/limits.md lists what the broker answers when each
# limit is reached; boards/linux.toml explains every key at more length.
#
# Start-up only: nothing here runs per packet, and a board unloads this
# module once started (firmware/startup_only.py); the broker reads
# its limits from a small Limits object (limits.py) that new_settings
# fills. The
# "why" of each key is a comment, not a string, so it costs no RAM even
# while the module is loaded.

from common.broker.limits import ConfigError as ConfigError  # (re-exported: the API of this module)
from common.broker.limits import Limits
from common.broker.topics import validate_topic_filter
from common.mqtt.consts import U16_MAX, U32_MAX

# Kinds of value.
K_INT = "int"  # an int (not a bool) in lo..hi
K_NUMBER = "number"  # an int or a float in lo..hi (seconds that may be fractional)
K_BOOL = "bool"
K_STR = "str"
K_CHOICE = "choice"  # one of the strings in `lo`
K_LIST = "list"  # a list of strings
K_FILTERS = "filters"  # a list of valid topic filters
K_NETWORKS = "networks"  # a list of addresses or ADDRESS/LENGTH networks (netmask.py)
K_OBJECT = "object"  # a table / JSON object, checked by its own schema

# The log levels, name -> number (Python logging's numbers: the host hands
# them to `logging`, the board's Log compares them). The one table of both
# shells.
LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
# The names from least to most severe: the choices shown in messages and --help.
LOG_LEVEL_NAMES = tuple(sorted(LOG_LEVELS, key=LOG_LEVELS.get))

LIMITS = (
    # -- connections and sessions --
    # beyond it a few more are accepted only to refuse CONNECT: 3.1.1 CONNACK 0x03, v5 0x89
    ("max_connections", 1000, K_INT, 0, None),
    ("max_sessions", 2000, K_INT, 0, None),  # live + orphaned persistent sessions
    ("connect_timeout", 10, K_INT, 0, None),  # s to complete CONNECT after accept
    ("max_client_id_length", 128, K_INT, 0, None),  # CONNACK 0x02 / 0x85 beyond it
    ("allow_mqtt31", True, K_BOOL, None, None),  # accept protocol level 3 ("MQIsdp")
    ("max_keepalive", 0, K_INT, 0, U16_MAX),  # cap on a client's keep-alive (s), 0 = none
    ("persistent_session_expiry", 0, K_INT, 0, None),  # s an orphaned 3.1.1 session lives, 0 = forever
    ("max_session_expiry", U32_MAX, K_INT, 0, U32_MAX),  # cap on a v5 Session Expiry Interval
    # -- subscriptions and topics --
    ("max_subscriptions", 10000, K_INT, 0, None),  # total subscription slots
    ("max_subscriptions_per_client", 100, K_INT, 0, None),  # SUBACK 0x80 / 0x97 beyond it
    ("max_topic_levels", 32, K_INT, 0, None),  # bounds the trie's depth
    ("max_topic_length", 1024, K_INT, 0, U16_MAX),  # bytes of UTF-8
    ("deny_subscribe", [], K_FILTERS, None, None),  # filters refused with SUBACK 0x80 / 0x87
    ("match_cache_bytes", 65536, K_INT, 0, None),  # topic -> subscribers cache, 0 = off
    # -- messages --
    ("max_packet_size", 1048576, K_INT, 16, None),  # bytes, whole packet; 0x95 beyond it
    # The defaults size a gateway on a Raspberry Pi (1 GB RAM, a store on
    # SD/SSD): queues are bounded by bytes, per session and all together;
    # the counts are caps for boards, whose pools are preallocated, set here
    # so that they never bind first. docs/limits.md has the arithmetic.
    ("max_messages", 1000000, K_INT, 0, None),  # message slabs held at once
    ("max_queued_messages", 1000000, K_INT, 0, None),  # per session
    ("max_queued_bytes", 67108864, K_INT, 0, None),  # topic + payload bytes queued per session
    # all sessions' queues together: topic + payload + 512 B per queued copy
    # (outbox.QUEUED_COST, about the RAM a queued message costs)
    ("max_queued_total_bytes", 134217728, K_INT, 0, None),
    # what a full queue does (docs/limits.md): refuse the publish (v5 0x97,
    # 3.1.1 not acknowledged, so nothing acknowledged is lost), drop the new
    # message, or drop the oldest queued one (keeps the freshest readings)
    ("queue_full", "refuse", K_CHOICE, ("drop_newest", "drop_oldest", "refuse"), None),
    ("max_inflight", 16, K_INT, 1, U16_MAX),  # unacknowledged QoS 1/2 PUBLISHes to one client
    ("max_inflight_in", 64, K_INT, 1, U16_MAX),  # QoS 2 ids awaiting PUBREL (v5 Receive Maximum)
    ("max_out_buffer", 262144, K_INT, 0, None),  # bytes waiting for a slow reader before QoS 0 drops
    # s a retained replay may wait for its client to read before the client is
    # disconnected (v5 DISCONNECT 0x97), 0 = never
    ("replay_stall_timeout", 30, K_INT, 0, None),
    ("queue_qos0_offline", False, K_BOOL, None, None),  # queue QoS 0 for offline persistent sessions
    ("max_retained", 10000, K_INT, 0, None),  # retained messages; beyond it new ones are dropped and counted
    ("max_retained_bytes", 16777216, K_INT, 0, None),  # payload bytes of the retained messages
    # -- rate limits per client (docs/limits.md "Rate limits"), 0 = off --
    ("rate_messages", 0, K_INT, 0, None),  # PUBLISHes/s one client may send
    ("rate_bytes", 0, K_INT, 0, None),  # PUBLISH bytes/s one client may send
    ("rate_subscribes", 0, K_INT, 0, None),  # topic filters/s one client may subscribe
    # s a client may stay over them (held back, not read) before v5 DISCONNECT
    # 0x96 / 3.1.1 close; 0 = never (back-pressure only)
    ("rate_grace", 10, K_INT, 0, None),
    # the same, shared by all connections of one user name (anonymous: none)
    # and by all clients of one listener; held back and closed as above
    ("user_rate_messages", 0, K_INT, 0, None),
    ("user_rate_bytes", 0, K_INT, 0, None),
    ("user_rate_subscribes", 0, K_INT, 0, None),
    ("listener_rate_messages", 0, K_INT, 0, None),
    ("listener_rate_bytes", 0, K_INT, 0, None),
    ("listener_rate_subscribes", 0, K_INT, 0, None),
    # CONNECTs/s one source address may send (connect_rate.py); over it:
    # CONNACK v5 0x9F (Connection rate exceeded), 3.1.1 0x03; 0 = off
    ("rate_connects", 0, K_INT, 0, None),
    # -- v5 capabilities announced in CONNACK --
    ("maximum_qos", 2, K_INT, 0, 2),  # highest QoS accepted
    ("retain_available", True, K_BOOL, None, None),
    ("wildcard_subscriptions", True, K_BOOL, None, None),
    ("subscription_identifiers", True, K_BOOL, None, None),
    ("shared_subscriptions", True, K_BOOL, None, None),
    ("topic_alias_maximum", 16, K_INT, 0, U16_MAX),  # inbound aliases a v5 client may use
    ("response_information", "", K_STR, None, None),  # answer to Request Response Information
    # -- authentication --
    # v5 enhanced authentication: lines "user:salt:iterations:StoredKey:ServerKey"
    # (base64) made by `python -m cpython_host scram-user`; empty = method off.
    ("scram_users", [], K_LIST, None, None),
    # Failed logins: each source address and user name is held back 1, 2,
    # 4 ... 60 s after a failure (secured.py); besides, a source address may
    # have this many failed logins (any user names) checked a minute, then
    # its logins wait, unchecked, for the minute to end. Addresses in
    # login_budget_exempt (a gateway's own loopback, a NAT) have no such
    # budget; their user names are still held back one by one.
    ("login_failures_per_address", 30, K_INT, 1, None),
    ("login_budget_exempt", ["127.0.0.0/8", "::1"], K_NETWORKS, None, None),
    # -- persistence (used when the shell gives the broker a store) --
    # "always": every acknowledged QoS 1/2 message is durable before its ack
    # leaves; "batch": the shell syncs every store_sync_ms, so a crash may
    # lose the acks of that last window.
    ("store_sync", "always", K_CHOICE, ("always", "batch"), None),
    ("store_sync_ms", 100, K_INT, 0, None),
    # -- Sparkplug B (docs/sparkplug.md) --
    # NBIRTH/DBIRTH republished retained under $sparkplug/certificates/ (if
    # the publisher may write there), that space closed to clients,
    # malformed spBv1.0/ topics refused, NDEATH wills stamped when sent
    ("sparkplug_aware", False, K_BOOL, None, None),
    # the gateway as its own edge node: its group id ("" = off), its edge
    # node id and the s between its NDATA reports (0 = the NBIRTH only)
    ("sparkplug_group", "", K_STR, None, None),
    ("sparkplug_node", "siskin", K_STR, None, None),
    ("sparkplug_interval", 10, K_INT, 0, None),
    # -- housekeeping --
    ("sys_interval", 10, K_INT, 0, None),  # s between $SYS updates, 0 = off
    ("prealloc", False, K_BOOL, None, None),  # create every pool object at start-up (boards)
)


LIMITS_DOC = "boards/linux.toml"  # explains every key of LIMITS

# Per listener (the host's [[listener]] tables; a board has one listener, its
# [limits]): these rate keys of LIMITS again, for that listener's clients
# (rate_*: each client's own bucket; listener_rate_*: the listener's shared
# one; rate_connects: the CONNECTs of each source address, in a table of its
# own). A key not set is [limits]'s; 0 is off on that listener. Read at
# start, as [limits] (rate_listeners.py applies them).
LISTENER_RATE_KEYS = (
    "rate_messages", "rate_bytes", "rate_subscribes",
    "listener_rate_messages", "listener_rate_bytes", "listener_rate_subscribes",
    "rate_connects",
)  # fmt: skip
LISTENER_RATES = tuple((e[0], None, e[2], e[3], e[4]) for e in LIMITS if e[0] in LISTENER_RATE_KEYS)


def refuse_limits_keys(where, table, schema):
    """Refuse a key of a listener's `table` that is a key of LIMITS but
    not of `schema` (the listener's): the message says where it goes."""
    for name in table:
        if [e for e in LIMITS if e[0] == name] and not [e for e in schema if e[0] == name]:
            raise ConfigError(
                "%s: %s is not a per-listener setting; set it in [limits] (a listener may set %s)."
                % (where, name, ", ".join(LISTENER_RATE_KEYS))
            )


# ---------------------------------------------------------------------------
# The schemas both shells' loaders extend (the host's TOML tables in
# cpython_host/config.py, a board's JSON in firmware/boardcfg.py): a key here
# means the same on both, with the same default, unless its comment says why
# not. A file name a config gives is taken from the config file's directory
# when it is relative (resolve()).

# Users, access control, anonymous access (docs/security.md); None = not set:
# no password file, no ACL, anonymous clients served on a loopback-only
# listener only. The host adds `acl` (the rules inline: a board reads them
# from acl_file only, its JSON having no room to spare for a second form).
SECURITY = (
    ("password_file", None, K_STR, None, None),  # users: `siskin passwd` (or mosquitto_passwd) lines
    ("acl_file", None, K_STR, None, None),  # Mosquitto acl_file rules; deny by default once set
    ("allow_anonymous", None, K_BOOL, None, None),  # clients without a user name; not set: loopback only
)

# JWT logins (docs/security.md "JWT logins"): the host's [security.jwt],
# a board's "jwt" object; on when present. Both verify HMAC secrets (HS256/
# 384/512, hashlib + hmac); the host adds public_key_file, jwks_url and
# jwks_refresh (RSA, EC and EdDSA keys need the `cryptography` package).
JWT = (
    ("secret_file", None, K_STR, None, None),  # HMAC secret (HS256/384/512): the file's bytes, trailing whitespace cut
    ("secret", None, K_STR, None, None),  # the HMAC secret itself (go-auth's jwt_secret); prefer secret_file
    ("algorithms", [], K_LIST, None, None),  # narrow the algorithms the keys allow; [] = every one of their type
    ("token_in", "password", K_CHOICE, ("password", "username"), None),  # the CONNECT field that carries the token
    ("issuer", None, K_STR, None, None),  # the iss a token must name; not set: not checked
    ("audience", None, K_STR, None, None),  # a value a token's aud must hold; not set: not checked
    ("leeway", 0, K_INT, 0, 3600),  # s of clock skew allowed on exp and nbf
    ("require_exp", True, K_BOOL, None, None),  # refuse tokens without exp
    ("user_claim", "sub", K_STR, None, None),  # the claim that names the user
    ("acl_claim", "acl", K_STR, None, None),  # the claim {publish: [...], subscribe: [...]} of ACL rules
    ("max_token_bytes", 4096, K_INT, 256, 65536),  # longer tokens are refused before parsing
)

# TLS on a listener (docs/security.md); "" = not set, certfile set = TLS.
# PEM files on the host, DER on a board (mbedTLS; tools/deploy converts).
# The host adds use_identity_as_username, identity and tls_version (OpenSSL
# reads a certificate's fields and bounds the version; a board's mbedTLS
# module does neither).
TLS = (
    ("certfile", "", K_STR, None, None),  # the server's certificate (then its chain)
    ("keyfile", "", K_STR, None, None),  # the certificate's private key, unencrypted
    ("cafile", "", K_STR, None, None),  # the CA(s) client certificates must chain to
    ("require_certificate", False, K_BOOL, None, None),  # mutual TLS: no valid client certificate, no connection
)

# The server keys of both shells, with a board's defaults; the host's differ
# where its scale does (HOST_SERVER_DEFAULTS): a listen() backlog of 1,024
# (a board's lwIP holds a handful of sockets in all) and 5 s for thousands
# of clients to close at a shutdown (3 s for a board's few).
SERVER = (
    ("backlog", 2, K_INT, 0, None),  # listen() backlog
    # s a closing connection is drained (input read and discarded) after the
    # half-close, so the last CONNACK/DISCONNECT is not destroyed by a reset.
    ("close_linger", 2, K_NUMBER, 0, None),
    ("shutdown_timeout", 3, K_NUMBER, 0, None),  # s to wait for the connections to close at a graceful stop
)
HOST_SERVER_DEFAULTS = {"backlog": 1024, "shutdown_timeout": 5}


def with_defaults(schema, new):
    """`schema` with the defaults of the keys in `new` changed."""
    return tuple((e[0], new[e[0]], e[2], e[3], e[4]) if e[0] in new else e for e in schema)


def resolve(base, name):
    """A file name from a config file in directory `base`: a relative one
    taken from there ("" or "." for base: as it is)."""
    if not name or name.startswith("/") or base in ("", "."):
        return name
    return base + name if base.endswith("/") else base + "/" + name


def _is_number(value, kind):
    if value is True or value is False:
        return False
    return isinstance(value, int) or (kind == K_NUMBER and isinstance(value, float))


def _valid(value, kind, lo, hi):
    if kind == K_INT or kind == K_NUMBER:
        return _is_number(value, kind) and value >= lo and (hi is None or value <= hi)
    if kind == K_BOOL:
        return value is True or value is False
    if kind == K_STR:
        return isinstance(value, str)
    if kind == K_CHOICE:
        return isinstance(value, str) and value in lo
    if kind == K_OBJECT:
        return isinstance(value, dict)
    if not isinstance(value, list):
        return False
    for item in value:
        if not isinstance(item, str) or (kind == K_FILTERS and validate_topic_filter(item, 0, 0)):
            return False
        if kind == K_NETWORKS:
            from common.broker.netmask import parse_network  # (only when a config lists networks)

            if parse_network(item) is None:
                return False
    return True


def check(where, obj, schema, listed_in=""):
    """The values of `obj` (a dict from a config file), checked against `schema`.

    `where` names the file and table for the message ("site.toml: [limits]");
    `listed_in` says where every key is documented (else the message lists
    them). Returns a new dict (lists copied); raises ConfigError.
    """
    out = {}
    for name in obj:
        entry = None
        for e in schema:
            if e[0] == name:
                entry = e
                break
        if entry is None:
            from common.broker.settings_hint import did_you_mean  # the error path only

            names = [e[0] for e in schema]
            hint = did_you_mean(name, names)
            listed = listed_in + " lists every key" if listed_in else "known keys: " + ", ".join(names)
            raise ConfigError(
                "%s: unknown key %r%s%s Fix or remove it (%s)." % (where, name, hint, "" if hint else ".", listed)
            )
        value = obj[name]
        kind, lo, hi = entry[2], entry[3], entry[4]
        if not _valid(value, kind, lo, hi):
            raise ConfigError("%s: %s = %r: wants %s; fix the value." % (where, name, value, wants(kind, lo, hi)))
        out[name] = list(value) if isinstance(value, list) else value
    return out


def wants(kind, lo, hi):
    """What a key of `kind` (bounded by lo, hi) accepts, in words."""
    if kind == K_INT or kind == K_NUMBER:
        what = "an integer" if kind == K_INT else "a number"
        if hi is None:
            return "%s >= %d" % (what, lo)
        return "%s %d..%d" % (what, lo, hi)
    if kind == K_BOOL:
        return "true or false"
    if kind == K_STR:
        return "a string"
    if kind == K_CHOICE:
        return "one of " + ", ".join(lo)
    if kind == K_LIST:
        return 'a list of strings, e.g. ["a", "b"]'
    if kind == K_FILTERS:
        return 'a list of strings that are valid topic filters, e.g. ["a/#", "+/b"]'
    if kind == K_NETWORKS:
        return 'a list of addresses or networks (no host bits set), e.g. ["127.0.0.0/8", "::1", "192.168.1.0/24"]'
    return "a table ({...} in JSON, [name] in TOML)"


def new_settings(overrides=None, where="settings"):
    """The broker's limits (limits.Limits): every key of LIMITS at its
    default, then `overrides` (update_settings)."""
    settings = Limits()
    values = defaults(LIMITS)
    for name in values:
        setattr(settings, name, values[name])
    settings.per_listener = {}  # listener key -> the LISTENER_RATES it sets (the host's [[listener]] tables)
    if overrides:
        update_settings(settings, overrides, where)
    return settings


def update_settings(settings, overrides, where="settings"):
    """Apply a dict of overrides; raise ConfigError (a ValueError) naming a bad key or value."""
    values = check(where, overrides, LIMITS, LIMITS_DOC)
    for name in values:
        setattr(settings, name, values[name])


def defaults(schema):
    """Every key of `schema` with its default (lists and tables copied)."""
    out = {}
    for e in schema:
        default = e[1]
        out[e[0]] = (
            list(default) if isinstance(default, list) else dict(default) if isinstance(default, dict) else default
        )
    return out


def content_lines(text):
    """(line number, stripped line) of each line of a text config file
    (password file, acl_file) that is neither blank nor a "#" comment."""
    out = []
    number = 0
    for line in text.split("\n"):
        number += 1
        line = line.strip()
        if line and not line.startswith("#"):
            out.append((number, line))
    return out
