"""What the status page shows: GET /api/status, and the samples behind its charts and rates.

Theory of operation
-------------------
The page (cpython_host/web/) asks every 2 s; `Status.document()` answers
from the broker's tables as they are (common/broker/admin.py), in the
order of what a gateway's operator asks first: is the uplink up and how
much waits for it (the bridges), which devices are offline (persistent
sessions without their client), is anything dropped or refused (each $SYS
counter of a drop or refusal, with the limit that decided it: DROPS), the
store's health, the certificates and when they expire, then the clients.

Rates need two readings: `Status.sample()` runs every [http]
sample_interval seconds and keeps the last SAMPLES of them: messages and
bytes per second (the charts), each bridge's sent and received rates,
the store's syncs per second, and the drop counters at each sample, so
the page can say what was dropped within the window and not only since
start. It also notices a store compaction (the log's compaction count
moved) and keeps the time: within one sample interval.

Who looks decides what is shown (web.Viewer): an administrator sees
everything; another user sees the counts, the drop counters and the store
(as /metrics and /api/store show them), the bridges' state and figures
without their addresses and errors, and only its own clients and sessions;
no certificates.
"""

from __future__ import annotations

import collections
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from common import VERSION
from common.broker import admin
from common.broker.broker import Broker
from common.broker.session import NEVER
from common.driver import Driver
from cpython_host.logtext import recent
from cpython_host.operations.certs import CertificateFiles
from cpython_host.operations.client_figures import install
from cpython_host.operations.metrics import store_size

SAMPLES = 120  # samples kept, one every [http] sample_interval s
MAX_LISTED = 1000  # entries of a list on the page (the full lists: /api/clients, /api/sessions)


def size_text(n: int) -> str:
    """A byte count as its settings are usually written: 256 KiB, 64 MiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << (shift - 4)) == 0:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n:,} B"


def _queues(s: Any) -> str:
    return (
        f"max_queued_messages {s.max_queued_messages:,}, max_queued_bytes {size_text(s.max_queued_bytes)} per session"
    )


# Every $SYS counter of a message dropped or refused, a client refused or
# closed: (snapshot key, what happened, the limit or rule that decided it,
# from the settings in force). docs/limits.md and docs/monitoring.md name the
# same; tests/host/test_status_page.py checks that every such $SYS counter
# is here.
def _rate(s: Any, name: str) -> str:
    """A rate setting in words: [limits]' value and each listener's own (Limits.per_listener)."""
    own = [f"#{key + 1} {values[name] or 'off'}" for key, values in sorted(s.per_listener.items()) if name in values]
    return f"{name} {getattr(s, name) or 'off'}" + (f"; [[listener]] {', '.join(own)}" if own else "")


DROPS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    (
        "dropped_qos0",
        "QoS 0 messages dropped: a slow reader's output was full, or the session was offline",
        lambda s: f"max_out_buffer {size_text(s.max_out_buffer)}; offline: queue_qos0_offline = {str(s.queue_qos0_offline).lower()}",
    ),
    ("dropped_queue_full", "messages dropped: a session's queue was full", lambda s: f"{_queues(s)} (queue_full = {s.queue_full})"),
    ("refused_queue_full", "QoS 1/2 publishes refused: a subscriber's queue was full", lambda s: f"{_queues(s)} (queue_full = refuse)"),
    (
        "dropped_queue_total",
        "messages dropped: all queues together were full",
        lambda s: f"max_queued_total_bytes {size_text(s.max_queued_total_bytes)} (queue_full = {s.queue_full})",
    ),
    (
        "refused_queue_total",
        "QoS 1/2 publishes refused: all queues together were full",
        lambda s: f"max_queued_total_bytes {size_text(s.max_queued_total_bytes)} (queue_full = refuse)",
    ),
    ("dropped_too_large", "messages not sent: larger than the client accepts", lambda s: "the client's Maximum Packet Size (v5 CONNECT)"),
    ("dropped_no_slab", "messages dropped or refused: no room to hold another message", lambda s: f"max_messages {s.max_messages:,}"),
    (
        "dropped_retained",
        "retained messages not kept (delivered, not retained)",
        lambda s: f"max_retained {s.max_retained:,}, max_retained_bytes {size_text(s.max_retained_bytes)}",
    ),
    ("expired", "messages expired before delivery", lambda s: "the publisher's Message Expiry Interval (v5)"),
    ("denied_publish", "publishes and wills refused by the ACL", lambda s: "[security] ACL: write rules"),
    ("refused_sparkplug", "Sparkplug publishes and wills refused: malformed topic, or under $sparkplug/certificates/", lambda s: "sparkplug_aware (docs/sparkplug.md)"),
    ("denied_subscribe", "subscriptions refused or removed by the ACL", lambda s: "[security] ACL: read rules"),
    ("denied_delivery", "messages not sent: their client may no longer read them", lambda s: "[security] ACL: read rules"),
    (
        "refused_connections",
        "connections closed at once: far beyond the connection limit",
        lambda s: f"max_connections {s.max_connections:,} (and a few slots to refuse politely)",
    ),
    ("login_failed", "logins refused: bad user name or password", lambda s: "[security] password_file"),
    ("denied_takeover", "CONNECTs refused: the client id's session belongs to another user", lambda s: "sessions belong to their user"),
    ("tls_failed", "TLS connections refused before MQTT", lambda s: f"connect_timeout {s.connect_timeout} s; the certificates"),
    (
        "websocket_refused",
        "WebSocket upgrades refused, connections closed for bad frames",
        lambda s: f"max_packet_size {size_text(s.max_packet_size)} + 64 KiB per message; the listener's path and origins",
    ),
    (
        "closed_replay_stalled",
        "clients closed: they read nothing of a retained replay",
        lambda s: f"replay_stall_timeout {s.replay_stall_timeout} s",
    ),
    ("closed_out_of_memory", "clients closed: their packet found no memory", lambda s: "the heap"),
    ("closed_token_expired", "clients closed: their JWT expired", lambda s: "the token's exp ([security.jwt] leeway)"),
    ("auth_offline_refused", "CONNECTs refused: the auth hook did not answer", lambda s: "[security.http] timeout; fail-closed"),
    ("auth_offline_allowed", "CONNECTs let in on a cached allow: the auth hook did not answer", lambda s: "[security.http] offline_grace"),
    ("auth_offline_checks_refused", "PUBLISH/SUBSCRIBE checks refused: acl_url did not answer", lambda s: "[security.http] timeout; fail-closed"),
    ("auth_offline_checks_allowed", "PUBLISH/SUBSCRIBE checks allowed on a cached allow: acl_url did not answer", lambda s: "[security.http] offline_grace"),
    ("rate_held_messages", "clients held back: over their PUBLISHes/s", lambda s: _rate(s, "rate_messages")),
    ("rate_held_bytes", "clients held back: over their PUBLISH bytes/s", lambda s: _rate(s, "rate_bytes")),
    ("rate_held_subscribes", "clients held back: over their subscribes/s", lambda s: _rate(s, "rate_subscribes")),
    ("rate_held_user_messages", "clients held back: their user over its PUBLISHes/s", lambda s: f"user_rate_messages {s.user_rate_messages or 'off'}"),
    ("rate_held_user_bytes", "clients held back: their user over its PUBLISH bytes/s", lambda s: f"user_rate_bytes {s.user_rate_bytes or 'off'}"),
    ("rate_held_user_subscribes", "clients held back: their user over its subscribes/s", lambda s: f"user_rate_subscribes {s.user_rate_subscribes or 'off'}"),
    ("rate_held_listener_messages", "clients held back: their listener over its PUBLISHes/s", lambda s: _rate(s, "listener_rate_messages")),
    ("rate_held_listener_bytes", "clients held back: their listener over its PUBLISH bytes/s", lambda s: _rate(s, "listener_rate_bytes")),
    ("rate_held_listener_subscribes", "clients held back: their listener over its subscribes/s", lambda s: _rate(s, "listener_rate_subscribes")),
    ("closed_rate_limited", "clients closed: over their rates for rate_grace s", lambda s: f"rate_grace {s.rate_grace} s"),
    ("refused_connect_rate", "CONNECTs refused: their address over its connects/s", lambda s: _rate(s, "rate_connects")),
    ("sn_malformed", "MQTT-SN: datagrams the codec refused (length, truncation, unknown type, flags, UTF-8)", lambda s: "MQTT-SN v1.2 §5.2 (docs/mqtt-sn.md)"),
    ("sn_unknown_clients", "MQTT-SN: datagrams from an address with no connection (answered with DISCONNECT)", lambda s: "a CONNECT first"),
    ("sn_refused_connects", "MQTT-SN: CONNECTs refused: SN clients over max_clients, the broker's max_connections or CONNACK", lambda s: "[[listener]] mqtt-sn max_clients; max_connections"),
    ("sn_refused_subscriptions", "MQTT-SN: SUBSCRIBEs the broker refused (ACL, limits): SUBACK 0x03", lambda s: "the ACL; max_subscriptions_per_client"),
    ("sn_topic_ids_refused", "MQTT-SN: topic ids not given: the client's table full (0x01) or an invalid name (0x02)", lambda s: "[[listener]] mqtt-sn max_topic_ids"),
    ("sn_unknown_topic_ids", "MQTT-SN: PUBLISH, SUBSCRIBE naming a topic id the client has not got: 0x02", lambda s: "REGISTER first; predefined ids"),
    ("sn_keep_alive_lost", "MQTT-SN: SN clients silent for 1.5 x their Duration: lost, will published", lambda s: "the client's CONNECT Duration"),
    ("sn_retries_exhausted", "MQTT-SN: SN clients that acknowledged no resend of a PUBLISH or REGISTER: lost, will published", lambda s: "[[listener]] mqtt-sn retry_interval, max_retries"),
    ("sn_wrong_state", "MQTT-SN: messages the client's state does not take (asleep: anything but PINGREQ, CONNECT, DISCONNECT, a will update): 0x01 where answered", lambda s: "MQTT-SN v1.2 §6.14: PINGREQ or CONNECT first"),
    ("sn_too_large", "MQTT-SN: datagrams over max_packet_size, from a client or to it: dropped", lambda s: "[[listener]] mqtt-sn max_packet_size"),
    ("sn_unsealed", "MQTT-SN: datagrams not sealed to a listener with keys (SEARCHGW only may be): dropped", lambda s: "[[listener]] mqtt-sn keys"),
    ("sn_bad_seal", "MQTT-SN: envelopes that do not open (unknown key id, tag mismatch, truncated): dropped", lambda s: "[[listener]] mqtt-sn keys"),
    ("sn_replayed", "MQTT-SN: envelopes replayed or older than the 64-datagram window: dropped", lambda s: "the envelope's replay window (docs/mqtt-sn.md)"),
    ("sn_challenged", "MQTT-SN: envelopes under no challenge the gateway holds (a client's first, or from before a restart): answered with a challenge", lambda s: "the envelope's challenges (docs/mqtt-sn.md)"),
    ("sn_wrong_key", "MQTT-SN: a CONNECT or datagram whose client id is not its key's: CONNACK 0x03 / dropped", lambda s: "[[listener]] mqtt-sn keys: one key per client id"),
)  # fmt: skip
HTTP_REFUSED = ("http_refused", "HTTP connections closed at once", "32 open, 8 from one address ([http])")
# Each bridge's: (figure, what happened, the rule that decided), as "bridge NAME figure".
BRIDGE_DROPS = (
    (
        "dead_lettered",
        "messages the bridge will never deliver: counted, logged, skipped",
        "the upstream refused them (v5 PUBACK/PUBREC >= 0x80, its Maximum Packet Size, a topic it cannot take), or no rule routes them any more",
    ),
    ("dropped", "QoS 0 messages going up while the upstream was away", "QoS 0 is not queued for an absent upstream"),
)  # fmt: skip


def bridge_figures(runner: Any) -> dict[str, Any]:
    """The figures of one running bridge (common/bridge/runner.py Runner.status(),
    as /api/bridges gives them) and the addresses it tries."""
    return {**runner.status(), "addresses": list(runner.settings.addresses)}


def listener_lines(server: Any) -> list[str]:
    """"ADDRESS: what it serves" of each MQTT listener (as the start-up log says it)."""
    return [f"{lst.name}: {lst.describe()}" for lst in server.listening]


def tls_files(server: Any) -> list[tuple[str, str]]:
    """(what, file) of each certificate and CA file in use: the TLS listeners',
    the HTTP listener's, the bridges'. `server`: the host's BrokerServer."""
    users = [(f"listener {lst.name}", "", "client CA", lst.config) for lst in server.listening]
    users += [(f"bridge {r.settings.name}", ": client certificate", "upstream CA", r.settings) for r in server.bridges]
    out = []
    for what, cert, ca, cfg in users:
        if cfg.certfile:
            out.append((what + cert, cfg.certfile))
        if cfg.cafile:
            out.append((f"{what}: {ca}", cfg.cafile))
    http = server.config.http
    if http is not None and http.certfile:
        out.append(("HTTP listener", http.certfile))
    return out


def store_backend(broker: Broker) -> Any:
    """The store's backend (common/store/filelog.py FileLog), or None without a store."""
    store = getattr(broker.listener, "store", None)
    return getattr(store, "backend", None)


class Status:
    def __init__(
        self,
        driver: Driver,
        store_path: str | None,
        sample_seconds: int,
        bridges: Callable[[], Any] = list,
        tls: Callable[[], list[tuple[str, str]]] = list,
        http_refused: Callable[[], int] = lambda: 0,
        listeners: Callable[[], list[str]] = list,
    ) -> None:
        self.driver = driver
        self.broker: Broker = driver.broker
        self.store_path = store_path  # the store's log file, None without one
        self.sample_seconds = sample_seconds
        self.bridges = bridges  # the running BridgeRunners, now
        self.tls = tls  # (what, file) of the certificates in use, now
        self.http_refused = http_refused
        self.listeners = listeners  # "address: what" of each MQTT listener, now
        self.figures = install(self.broker)  # the core counts per client from now on
        driver.clock()
        # Wall time - the core's seconds: fixed once, so that a time the
        # core holds (an expiry) shows the same at every poll.
        self.offset = time.time() - driver.now
        self.certificates = CertificateFiles()
        self.samples: collections.deque[dict[str, float]] = collections.deque(maxlen=SAMPLES)
        # (wall time, drop counts) at each sample: the page's window of recent drops.
        self.marks: collections.deque[tuple[float, dict[str, int]]] = collections.deque(maxlen=SAMPLES + 1)
        self.last: tuple[float, tuple[int, ...]] | None = None  # the previous sample: time, counters
        self.bridge_last: dict[str, tuple[float, int, int]] = {}  # name -> time, sent, received
        self.bridge_rates: dict[str, tuple[float, float]] = {}  # name -> sent/s, received/s
        self.sync_rate = 0.0
        self.compactions = self.compaction_count()
        self.last_compaction: float | None = None  # wall time (within a sample) the log was last compacted

    # ------------------------------------------------------------ samples

    def sample(self) -> None:
        """Read the counters: the rates since the previous sample."""
        now = time.time()
        snap = self.broker.snapshot()
        counts = (
            snap["messages_received"],
            snap["messages_sent"],
            snap["bytes_received"],
            snap["bytes_sent"],
            self.broker.listener.syncs(),
        )
        if self.last is not None:
            dt = max(now - self.last[0], 1e-3)
            rates = [(a - b) / dt for a, b in zip(counts, self.last[1])]
            self.samples.append(
                {
                    "t": round(now, 3),
                    "received": round(rates[0], 2),
                    "sent": round(rates[1], 2),
                    "received_bytes": round(rates[2], 1),
                    "sent_bytes": round(rates[3], 1),
                }
            )
            self.sync_rate = round(rates[4], 2)
        self.last = (now, counts)
        self.marks.append((now, self.drop_counts(snap)))
        readings: dict[str, tuple[float, int, int]] = {}  # (bridges removed since are forgotten)
        per_second: dict[str, tuple[float, float]] = {}
        for runner in self.bridges():
            b = bridge_figures(runner)
            name = b["name"]
            before = self.bridge_last.get(name)
            if before is not None:
                dt = max(now - before[0], 1e-3)
                per_second[name] = (round((b["sent"] - before[1]) / dt, 2), round((b["received"] - before[2]) / dt, 2))
            readings[name] = (now, b["sent"], b["received"])
        self.bridge_last, self.bridge_rates = readings, per_second
        compactions = self.compaction_count()
        if compactions != self.compactions:
            self.compactions = compactions
            self.last_compaction = now

    def drop_rows(self, snap: dict[str, int]) -> list[tuple[str, str, str, int]]:
        """(key, what happened, the limit, count since start) of every drop counter: $SYS's, this listener's, the bridges'."""
        settings = self.broker.settings
        rows = [(key, what, limit(settings), snap[key]) for key, what, limit in DROPS]
        rows.append((*HTTP_REFUSED, self.http_refused()))
        for runner in self.bridges():
            b = bridge_figures(runner)
            rows += [(f"bridge {b['name']} {key}", what, limit, b[key]) for key, what, limit in BRIDGE_DROPS]
        return rows

    def drop_counts(self, snap: dict[str, int]) -> dict[str, int]:
        return {key: count for key, _, _, count in self.drop_rows(snap)}

    def compaction_count(self) -> int:
        return int(getattr(store_backend(self.broker), "compactions", 0))

    # ------------------------------------------------------------ the page

    def wall(self, t: int) -> float:
        """The wall time of the core's time `t` (whole seconds)."""
        return self.offset + t

    def store(self) -> dict[str, Any]:
        backend = store_backend(self.broker)
        return {
            "enabled": self.store_path is not None,
            "path": self.store_path,
            "size_bytes": store_size(self.store_path),
            "live_bytes": getattr(backend, "live_bytes", None),
            "syncs": self.broker.listener.syncs(),
            "syncs_per_second": self.sync_rate,
            "store_sync": self.broker.settings.store_sync,
            "compactions": self.compactions,
            "last_compaction": self.last_compaction,
        }

    def drops(self, snap: dict[str, int]) -> list[dict[str, Any]]:
        """Each drop counter: since start, and since the oldest sample (`recent`)."""
        then = self.marks[0][1] if self.marks else {}
        return [
            {"key": key, "what": what, "limit": limit, "count": count, "recent": count - then.get(key, 0)}
            for key, what, limit, count in self.drop_rows(snap)
        ]

    def offline(self, viewer: Any) -> list[dict[str, Any]]:
        """Persistent sessions whose client is away, with when it was last seen."""
        out = []
        seen = self.figures.last_seen
        bridges = {runner.bridge.local.client_id for runner in self.bridges()}  # (their queues: bridge_list)
        for client_id in sorted(self.broker.sessions.by_client_id):
            session = self.broker.sessions.by_client_id[client_id]
            if session.conn is not None or session.expiry_interval == 0 or client_id in bridges:
                continue
            if not viewer.owns(session.user or None):
                continue
            last = seen.get(client_id)
            if last is None and session.expires_at:
                last = self.wall(session.expires_at - session.expiry_interval)  # (restored from the store)
            out.append(
                {
                    "client_id": client_id,
                    "user": session.user or None,
                    "last_seen": None if last is None else round(last, 3),
                    "expires": None if session.expiry_interval == NEVER else round(self.wall(session.expires_at)),
                    "queued": session.queue.count,
                    "queued_bytes": session.queued_bytes,
                    "inflight": len(session.inflight),
                    "dropped": session.dropped,
                    "subscriptions": len(session.subs),
                }
            )
        return out

    def bridge_list(self, viewer: Any) -> list[dict[str, Any]]:
        out = []
        for runner in self.bridges():
            b = bridge_figures(runner)
            session = self.broker.sessions.find(runner.bridge.local.client_id)
            # Its local session (its queue), online or not: shown here, never as a device's.
            b["local_session"] = {
                "client_id": runner.bridge.local.client_id,
                "online": session is not None and session.conn is not None,
                "kept": session is not None,
            }
            b["sent_rate"], b["received_rate"] = self.bridge_rates.get(b["name"], (None, None))
            if not viewer.admin:  # as /metrics shows them: no addresses, no errors
                b["address"] = b["last_error"] = None
                b["addresses"] = []
            out.append(b)
        return out

    def certificate_list(self) -> list[dict[str, Any]]:
        return [{"what": what, **self.certificates.read(path)} for what, path in self.tls()]

    def gateway(self) -> dict[str, Any]:
        """This machine at a glance: its name, the listeners, the process's memory, the free
        space where the store is, the time zone (the page shows times in the browser's)."""
        heap = self.driver.heap
        disk = None
        if self.store_path is not None:
            try:
                st = os.statvfs(os.path.dirname(self.store_path))
                disk = {"free": st.f_bavail * st.f_frsize, "total": st.f_blocks * st.f_frsize}
            except OSError:
                pass
        return {
            "host": socket.gethostname(),
            "listeners": self.listeners(),
            "memory": heap() if heap is not None else None,  # resident set size, bytes
            "disk": disk,
            "data_dir": None if self.store_path is None else os.path.dirname(self.store_path),
            "timezone": time.strftime("%Z (UTC%z)"),
        }

    def warnings(self) -> list[dict[str, Any]]:
        """The recent log lines at warning level or above, newest first (logtext.recent)."""
        return [
            {"t": round(t, 3), "level": level, "logger": name, "text": text}
            for t, level, name, text in reversed(recent.records)
        ]

    def document(self, viewer: Any) -> dict[str, Any]:
        """GET /api/status for `viewer` (web.Viewer)."""
        broker = self.broker
        snap = broker.snapshot()
        bridges = {runner.bridge.local.client_id for runner in self.bridges()}
        # A bridge's own local client is no device: it is shown with its bridge (bridge_list).
        clients = [c for c in admin.clients(broker) if viewer.owns(c["user"]) and c["client_id"] not in bridges]
        bridge_clients = sum(1 for c in admin.clients(broker) if c["client_id"] in bridges)
        subscriptions = []
        for session in admin.sessions(broker):
            if viewer.owns(session["user"]):
                for flt in session["subscriptions"]:
                    subscriptions.append({"client_id": session["client_id"], "filter": flt})
        offline = self.offline(viewer)
        queued, size, inflight = admin.queues(broker)
        self.driver.clock()
        now = self.driver.now
        started = snap["started"] or now
        own = broker.routing.retained.own  # the broker's $SYS topics: not the clients' retained messages
        return {
            "version": VERSION,
            "time": round(time.time(), 3),  # the broker's wall clock: the page's "now"
            "gateway": self.gateway(),
            "warnings": self.warnings() if viewer.admin else [],
            "uptime": now - started,
            "started": round(self.wall(started)),
            "user": viewer.user,
            "admin": viewer.admin,
            "connected": snap["connected"] - bridge_clients,  # devices (a bridge's local client apart)
            "sessions": snap["sessions"],
            "offline": len(offline),
            "subscription_count": snap["subscriptions"],
            "retained": snap["retained"] - own,
            "retained_sys": own,
            "queued": queued,
            "queued_bytes": size,
            "inflight": inflight,
            "messages_received": snap["messages_received"],
            "messages_sent": snap["messages_sent"],
            "bridges": self.bridge_list(viewer),
            "offline_sessions": offline[:MAX_LISTED],
            "drops": self.drops(snap),
            "drops_since": self.marks[0][0] if self.marks else None,
            "store": self.store(),
            "certificates": self.certificate_list() if viewer.admin else None,
            "clients": clients[:MAX_LISTED],
            "subscriptions": subscriptions[:MAX_LISTED],
            "sample_seconds": self.sample_seconds,
            "throughput": list(self.samples),
        }
