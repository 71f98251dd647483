"""What each kind of upstream takes: the bridge's profiles.

A profile says what the upstream speaks (MQTT level, QoS, the bridge bit,
retain) and which messages it would refuse, so the bridge can dead-letter
those before sending instead of losing the connection over them (NATS and
AWS IoT close it; Azure IoT Hub too). settings.py checks the rules and keys
a profile needs at start; `refusal()` checks each message on its way up.

    mqtt    any MQTT broker (Mosquitto, EMQX, HiveMQ ...): 3.1.1 or 5, QoS 0-2
    nats    nats-server's MQTT listener (docs/nats.md): 3.1.1, QoS <= 1, no
            bridge bit, no "." or " " in a topic
    aws     AWS IoT Core: X.509 client certificate over TLS (ALPN
            x-amzn-mqtt-ca on port 443), QoS <= 1, no bridge bit; a topic of
            at most 256 bytes and 7 "/" (past a "$aws/rules/<rule>/" prefix),
            no other "$" topic, a payload of at most 128 KB; egress paced
            at 90 publishes/s and 460 KB/s (its quotas: 100/s, 512 KB/s)
    azure   Azure IoT Hub: 3.1.1, QoS <= 1, no retain, no bridge bit; the
            user name "<hub>/<device>/?api-version=...", the password a SAS
            token signed from the device key and renewed before it expires;
            up to devices/<device>/messages/events/, down from
            devices/<device>/messages/devicebound/#; a payload of at most 256 KB;
            egress paced at 90 % of the hub's device-to-cloud throttle for
            its azure_tier and azure_units (S1, 1 unit: 90 publishes/s)
    hosted  a hosted MQTT service with TLS and a user name (HiveMQ Cloud,
            EMQX Cloud ...): TLS required, user name and password required,
            no bridge bit (MQTT 5's No Local instead)
"""

AZURE_API_VERSION = "2021-04-12"


def client_id_of(settings):
    """The upstream client id of a bridge's settings ("" = "siskin-<name>")."""
    return settings.client_id or "siskin-" + settings.name


class Profile:
    """One kind of upstream (the module's table)."""

    def __init__(self, name, level=0, max_qos=2, bridge_bit=True, retain=True):
        self.name = name
        self.level = level  # the MQTT level it must speak, 0: the settings'
        self.max_qos = max_qos
        self.bridge_bit = bridge_bit  # it takes the 3.1.1 bridge bit
        self.retain = retain  # False: the retain flag is cleared on the way up
        self.max_topic = 0  # bytes (UTF-8), 0 none
        self.max_slashes = 0  # "/" in a topic, 0 none
        self.max_payload = 0  # bytes, 0 none
        self.bad_chars = ""  # characters no topic may hold
        self.dollar_ok = None  # the one "$" prefix it takes (None: "$" topics are not refused)
        self.exempt = ""  # a prefix whose next level does not count toward max_slashes
        self.tls = False  # TLS required (settings.py)
        self.user = False  # user name and password required (settings.py)
        self.certificate = False  # a client certificate required (settings.py)
        # Egress pacing (pacing.py) when the bridge's publish_rate / bytes_rate are not set; 0 = none.
        self.publish_rate = 0
        self.bytes_rate = 0

    def refusal(self, topic, payload, up):
        """Why the upstream would refuse this message (None: it takes it). `up`:
        the upstream client, for what its CONNACK said."""
        if self.bad_chars:
            for c in self.bad_chars:
                if c in topic:
                    return "%s cannot take a topic with %r" % (self.name, c)
        if self.dollar_ok is not None and topic[:1] == "$" and not topic.startswith(self.dollar_ok):
            return "%s takes no topic starting with $ but %s" % (self.name, self.dollar_ok)
        if self.max_topic and len(topic.encode()) > self.max_topic:
            return "%s takes topics of at most %d bytes" % (self.name, self.max_topic)
        if self.max_slashes:
            counted = topic
            if self.exempt and topic.startswith(self.exempt):
                rest = topic[len(self.exempt) :]
                counted = rest[rest.find("/") + 1 :] if "/" in rest else ""
            if counted.count("/") > self.max_slashes:
                return "%s takes topics of at most %d '/'" % (self.name, self.max_slashes)
        if self.max_payload and len(payload) > self.max_payload:
            return "%s takes payloads of at most %d bytes" % (self.name, self.max_payload)
        return None

    def credentials(self, settings, host, wall):
        """(user name, password, seconds the password lasts or 0) for a
        connection to `host` at wall-clock time `wall` (s since 1970)."""
        return settings.username, settings.password, 0

    def pace(self, settings):
        """(publishes/s, bytes/s) the bridge is paced at when its settings
        leave them to the profile (-1); 0 = none."""
        return self.publish_rate, self.bytes_rate


# IoT Hub's throttle of device-to-cloud sends per tier (Microsoft's "IoT Hub
# quotas and throttling"): Free, B1, S1: 12/s per unit but at least 100/s;
# B2, S2: 120/s per unit; B3, S3: 6,000/s per unit. It is the hub's, shared
# by all its devices, and IoT Hub answers beyond it with throttling errors
# (disconnects over MQTT); no bytes/s throttle (the daily quota counts
# messages in 4 KB blocks, 0.5 KB on Free). Tier -> (per unit, at least).
AZURE_TIERS = {
    "free": (12, 100),
    "b1": (12, 100),
    "s1": (12, 100),
    "b2": (120, 0),
    "s2": (120, 0),
    "b3": (6000, 0),
    "s3": (6000, 0),
}
AZURE_TIER_NAMES = ("free", "b1", "b2", "b3", "s1", "s2", "s3")


class Azure(Profile):
    def pace(self, settings):
        # 90 % of the hub's throttle for its tier and units, as aws's.
        per_unit, floor = AZURE_TIERS[settings.azure_tier]
        sends = per_unit * settings.azure_units
        return (sends if sends > floor else floor) * 9 // 10, 0

    def credentials(self, settings, host, wall):
        hub = settings.hub or host
        device = settings.client_id
        user = "%s/%s/?api-version=%s" % (hub, device, AZURE_API_VERSION)
        if not settings.device_key:
            return user, settings.password, 0  # a SAS token given as it is (or X.509)
        ttl = int(settings.sas_ttl)
        return user, sas_token(hub + "/devices/" + device, settings.device_key, wall + ttl), ttl


def sas_token(resource, key, expiry):
    """An IoT Hub SAS token (Microsoft's "Control access to IoT Hub with
    shared access signatures"): HMAC-SHA256, keyed with the base64-decoded
    device key, of the URL-encoded resource URI, a newline and the expiry
    (s since 1970); `sig` is its base64, URL-encoded."""
    from common.crypto.auth_scram import b64, unb64
    from common.crypto.hmac256 import hmac_sha256

    sr = url_quote(resource)
    sig = b64(hmac_sha256(unb64(key), ("%s\n%d" % (sr, expiry)).encode()))
    return "SharedAccessSignature sr=%s&sig=%s&se=%d" % (sr, url_quote(sig), expiry)


_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"


def url_quote(text):
    """Percent-encoding of everything but letters, digits and _.-~ (urllib's quote with safe='')."""
    out = []
    for b in text.encode():
        out.append(chr(b) if b in _SAFE else "%%%02X" % b)
    return "".join(out)


def _table():
    nats = Profile("nats", level=4, max_qos=1, bridge_bit=False)
    nats.bad_chars = ". "
    aws = Profile("aws", max_qos=1, bridge_bit=False)
    aws.max_topic = 256
    aws.max_slashes = 7
    aws.exempt = "$aws/rules/"
    aws.dollar_ok = "$aws/"
    aws.max_payload = 131072
    # AWS IoT Core allows 100 publishes/s and 512 KB/s per connection, and
    # disconnects beyond: paced at 90 % of each (its clock and ours differ,
    # and TCP may bunch what we space out).
    aws.publish_rate = 90
    aws.bytes_rate = 471859
    aws.tls = True
    aws.certificate = True
    azure = Azure("azure", level=4, max_qos=1, bridge_bit=False, retain=False)
    azure.max_payload = 262144
    azure.tls = True
    hosted = Profile("hosted", bridge_bit=False)
    hosted.tls = True
    hosted.user = True
    return (Profile("mqtt"), nats, aws, azure, hosted)


PROFILES = ("mqtt", "nats", "aws", "azure", "hosted")


def profile_named(name):
    """The Profile called `name` (one of PROFILES)."""
    for p in _table():
        if p.name == name:
            return p
    raise ValueError("no bridge profile %r" % name)
