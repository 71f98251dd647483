# A Broker's set-up: the attributes Broker.__init__ gives it, its parts made
# from the settings (routing table, sessions, connections, output, counters)
# and the code of the features the settings turn on (SCRAM's AUTH exchange,
# Sparkplug, rate limits, the CONNECT rate) loaded only with them.
#
# Its own module because it runs once per broker: a board makes one at
# start-up and unloads this module after it (firmware/startup_only.py), so
# that its code does not stay in the heap.

from common.broker.connection import REFUSAL_SLOTS, Connections
from common.broker.listener import StateListener
from common.broker.output import Output
from common.broker.route import TopicCache
from common.broker.routing_table import Routing
from common.broker.session import Sessions
from common.broker.stats import Stats
from common.compat import const
from common.mqtt.packets import PubAck, Publish

# Topic names cached (Broker.topics): at least this many slots, and one
# more per this many bytes of match_cache_bytes (about what an entry costs).
_TOPIC_CACHE_MIN = const(16)
_TOPIC_CACHE_COST = const(256)
# The settings of the rate limits that ratelimit.py keeps
_RATES = tuple(
    scope + "rate_" + kind for scope in ("", "user_", "listener_") for kind in ("messages", "bytes", "subscribes")
)


def set_up(broker, settings, entropy, listener):
    """Give a new `broker` its attributes: Broker.__init__ (whose
    arguments these are) calls it."""
    s = settings
    broker.settings = s
    broker.entropy = entropy
    broker.listener = listener if listener is not None else StateListener()
    broker.stats = Stats()
    # The parts: where messages go, who they go to, and the connections.
    broker.routing = Routing(s, broker.stats, broker.listener)
    broker.sessions = Sessions(s)
    broker.connections = Connections()
    # What each connection is sent and when it may leave (the store's sync):
    # the driver's face of the broker's output (output.py).
    broker.output = Output(broker.connections, broker.stats, broker.listener, s)
    broker.started = None  # first `now` seen, for uptime
    broker.sys_load = None  # sys_load.Load: $SYS's load/ averages (made by the first $SYS round)
    # The next timers, for the driver to sleep until (0 = none): the
    # earliest connection deadline in ms ticks (a lower bound: keep-alive
    # deadlines only move later, so it is recomputed when it comes due),
    # and the earliest session timer in seconds (fires when now > it).
    broker.conn_due = 0
    broker.session_due = 0
    broker.rate_due = 0  # ms ticks: the next release of a client held back for its rates (ratelimit.py)
    # Publishers not read for now (ids), because their messages are
    # piling up in an online subscriber's queue; `throttle_changed` tells
    # the driver to pause or resume their reading (take_throttle_changes).
    broker.throttled = []
    broker.throttle_changed = False
    broker.throttled_since = 0  # s: when `throttled` last became non-empty
    broker.throttle_off_until = 0  # s: no throttling before then (see tick)
    # Connections (ids) with a retained replay pending, and their
    # replay.Replay at the same index (common/broker/replay.py): their
    # input is not processed, and `replay_changed` tells the driver to
    # pause or resume their reading (take_replay_changes).
    broker.replaying = []
    broker.replays = []
    # cid -> the inbound QoS 2 ids of a 3.1.1 client whose PUBREC waits
    # for room in max_inflight_in (handle_publish QOS2_LATE_MAX); here,
    # not on the Connection: an attribute there costs every client RAM.
    broker.qos2_late = {}
    broker.replay_changed = False
    # Optional callable(level, text) set by the shell (set_logger): what
    # happened to whom. Levels as in logging (10 debug, 20 info, 30
    # warning). Never called on the per-message path; below log_level
    # not even formatted (a connection storm logs nothing at warning).
    broker.logger = None
    broker.log_level = 0
    # Enhanced authentication methods by name (v5 AUTH).
    broker.auth_methods = {}
    if s.scram_users:
        # (SCRAM users only: the exchange's code is not in a board's heap without)
        from common.broker.enhanced_auth import methods

        broker.auth_methods = methods(s.scram_users)
    # sparkplug_aware: the Sparkplug B checks and certificates; or the
    # gateway's own edge node's commands (sparkplug.py; not loaded without).
    broker.sparkplug = None
    broker.wall_ms = None  # the shell's wall clock: () -> ms since 1970 UTC (Sparkplug timestamps), or None
    if s.sparkplug_aware or s.sparkplug_group:
        from common.broker.sparkplug import Sparkplug

        broker.sparkplug = Sparkplug(s)
    # Users, access control and the anonymous switch (common/broker/login.py
    # set_security): None = no password file, no ACL, allow_anonymous not set.
    broker.users = None
    broker.acl = None
    broker.bridge_grants = {}  # "bridge NAME" (its local peer) -> () -> its ACL grants (login.client_rules)
    broker.allow_anonymous = None
    broker.listener_policies = {}  # the shell's listener key -> listener_policy.ListenerPolicy (set_security)
    broker.login_failures = {}  # (source address, user name) -> [failed logins, held until (s)] (secured.py)
    broker.address_failures = {}  # source address -> [failed logins, since (s)]: its budget
    broker.jwt = None  # jwt_auth.JwtAuth when the shell configures JWT logins
    broker.hook = None  # external_auth.ExternalAuth when the shell asks a service (HTTP)
    # ratelimit.RateLimits when a rate limit is set (rate_*, user_rate_*,
    # listener_rate_*), in [limits] or by a listener (Limits.per_listener)
    broker.rates = None
    if _rate_set(s, _RATES):
        from common.broker.ratelimit import RateLimits

        broker.rates = RateLimits(s, s.max_connections + REFUSAL_SLOTS)
    broker.connect_rate = None  # connect_rate.ConnectRate when rate_connects is set (so too)
    if _rate_set(s, ("rate_connects",)):
        from common.broker.connect_rate import ConnectRate

        broker.connect_rate = ConnectRate(s.rate_connects, s.per_listener)
    broker.denied_log_at = 0  # s: the next refused PUBLISH logged (one a second)
    # Reused for every PUBLISH and ack received (decode_packet_into)
    # and the warm topic names: none of them is allocated per message.
    broker.inbound = Publish()
    broker.inbound_ack = PubAck()
    broker.topics = TopicCache(_TOPIC_CACHE_MIN + s.match_cache_bytes // _TOPIC_CACHE_COST)


def _rate_set(s, names):
    """Whether one of the settings `names` is on: in [limits] or in a
    listener's own (Limits.per_listener)."""
    for name in names:
        if getattr(s, name):
            return True
        for key in s.per_listener:
            if s.per_listener[key].get(name):
                return True
    return False
