"""The settings of one MQTT-SN listener (docs/mqtt-sn.md): the schema both
shells check them with (the host's [[listener]] table with protocol =
"mqtt-sn"; a board's device config) and `sn_settings`, which turns the
checked values into the gateway's `SnSettings`, defined here. Start-up only.
"""

from common.broker.settings import K_BOOL, K_INT, K_OBJECT, K_STR, ConfigError
from common.broker.topics import validate_topic_name
from common.compat import from_hex

# (name, default, kind, lo, hi), as common/broker/settings.py's schemas
SN_LISTENER = (
    ("gw_id", 1, K_INT, 0, 255),  # the gateway id GWINFO answers a SEARCHGW with (§6.1)
    ("max_clients", 16, K_INT, 1, None),  # SN clients at once; one more: CONNACK 0x01 congestion
    ("max_topic_ids", 32, K_INT, 1, 65534),  # normal topic ids per client; one more: REGACK/SUBACK 0x01
    ("predefined", {}, K_OBJECT, None, None),  # predefined topic ids for every client: {"1" = "plant/alarm"}
    ("max_buffered", 1000, K_INT, 1, None),  # messages kept for a sleeping client (then queue_full's policy), QoS 0 behind a REGISTER
    ("max_packet_size", 1024, K_INT, 16, 65535),  # bytes of a datagram, both ways; longer: dropped, counted
    ("session_expiry", 86400, K_INT, 0, None),  # s a sleeping or lost client's session and messages are kept
    ("retry_interval", 10, K_INT, 1, 3600),  # Tretry (s): an unacked PUBLISH/REGISTER to a client is sent again
    ("max_retries", 5, K_INT, 1, 100),  # Nretry: resends at most; then the client is lost (its will)
    ("advertise_interval", 0, K_INT, 0, 65535),  # s between two ADVERTISEs to advertise_to (§6.1); 0 = none
    ("advertise_to", "", K_STR, None, None),  # "host:port" ADVERTISE goes to, e.g. a broadcast address
    ("allow_remote", False, K_BOOL, None, None),  # serve SN off loopback (v1.2 has no authentication)
    ("keys", {}, K_OBJECT, None, None),  # {client id: 32 or 64 hex digits}: every datagram sealed (Security)
)
SN_KEYS = tuple(e[0] for e in SN_LISTENER)


class SnSettings:
    """What the gateway needs of the settings (the shell fills it)."""

    def __init__(self):
        self.gw_id = 1
        self.max_clients = 16
        self.max_topic_ids = 32  # normal ids per client
        self.predefined = {}  # {topic id: topic name}, for every client (§6.7)
        self.loopback = True  # the listener is bound to loopback (anonymous access)
        self.listener_key = 0  # the shell's listener key (the peer's 4th item: per-listener security)
        self.max_buffered = 1000  # messages a sleeping client's session queues; then queue_full's policy
        self.max_packet_size = 1024  # bytes of a datagram, both ways
        # v5 Session Expiry of an SN client's session (s): how long a sleeping
        # or lost client's messages are kept for it
        self.session_expiry = 86400
        self.retry_interval = 10  # Tretry (s): an unacknowledged PUBLISH/PUBREL/REGISTER is sent again (§6.13)
        self.max_retries = 5  # Nretry: resent at most this often, then the client is lost
        self.advertise_interval = 0  # s between two ADVERTISEs (§6.1); 0: none
        self.advertise_to = None  # the shell's address ADVERTISE goes to (a broadcast address)
        self.keys = {}  # {client id: AES key bytes}: a keyed listener seals every datagram (envelope.py)
        self.envelope_overhead = 0  # octets a client's envelope adds to an SN message, at most


def _host_port(where, text):
    """advertise_to's "host:port" ("[v6]:port" too) as the (host, port) the shells send to."""
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        number = 0
    if not host or not 1 <= number <= 65535:
        raise ConfigError(
            '%s: advertise_to = %r: advertise_interval wants a "host:port" to send ADVERTISE to, '
            'e.g. advertise_to = "192.168.1.255:1884".' % (where, text)
        )
    return (host, number)


def sn_settings(where, values, loopback, key):
    """The gateway's SnSettings from checked `values` (missing keys at their
    default); `loopback`: the listener is bound to loopback only; `key`: the
    shell's listener key (per-listener security). ConfigError for a bad
    predefined topic id."""
    s = SnSettings()
    for e in SN_LISTENER:
        name = e[0]
        if name != "predefined" and name != "allow_remote" and name != "advertise_to" and name != "keys":
            setattr(s, name, values.get(name, e[1]))
    if s.advertise_interval:
        s.advertise_to = _host_port(where, values.get("advertise_to", ""))
    s.loopback = loopback
    s.listener_key = key
    predefined = {}
    table = values.get("predefined", {})
    for name in table:
        topic = table[name]
        try:
            topic_id = int(name)
        except ValueError:
            topic_id = 0
        if not 1 <= topic_id <= 0xFFFE:
            raise ConfigError(
                '%s: predefined: id %r: wants 1..65534, e.g. predefined = { "1" = "a/b" }.' % (where, name)
            )
        if not isinstance(topic, str) or validate_topic_name(topic):
            raise ConfigError("%s: predefined: %s = %r: wants a topic name without wildcards." % (where, name, topic))
        predefined[topic_id] = topic
    s.predefined = predefined
    s.keys = _keys(where, values.get("keys", {}))
    if s.keys:
        # 3 + the longest key id + C, ctr (12) + tag (16): envelope.up_overhead, without loading it
        s.envelope_overhead = 31 + max([len(name.encode()) for name in s.keys])
    return s


def _keys(where, table):
    """The `keys` table {client id: hex} as {client id: key bytes}."""
    keys = {}
    for name in table:
        text = table[name]
        key = None
        if isinstance(text, str) and (len(text) == 32 or len(text) == 64):
            try:
                key = from_hex(text)
            except ValueError:
                pass
        if key is None:
            raise ConfigError(
                "%s: keys: %s: wants 32 or 64 hex digits (an AES-128 or AES-256 key), e.g. from"
                " `openssl rand -hex 16`: keys = { \"sensor-1\" = \"00112233445566778899aabbccddeeff\" }." % (where, name)
            )
        if not 1 <= len(name.encode()) <= 255:
            raise ConfigError("%s: keys: %r: a client id of 1 to 255 UTF-8 octets names a key." % (where, name))
        keys[name] = key
    return keys
