"""Prometheus metrics for the host's HTTP listener (GET /metrics).

Theory of operation: nothing is counted here. The core keeps its counters
as plain integers (Broker.stats, read through Broker.snapshot()); a custom
prometheus_client Collector reads them when Prometheus scrapes, so the
message path pays nothing for metrics. The one figure measured in this
shell is the store's sync time: `time_syncs` wraps the store listener's
sync() (an fsync, milliseconds) with a clock read and a histogram update.
Process figures (resident memory, CPU, open files) come from
prometheus_client's own process collector.

Names follow Prometheus' conventions: `siskin_` prefix, base units (bytes,
seconds) in the name, `_total` for counters; docs/monitoring.md lists them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from common import VERSION
from common.broker import admin
from common.broker.broker import Broker
from common.broker.sys_topics import DROP_COUNTERS, SYS_FIGURES

# Store syncs take from tens of microseconds (page cache) to a second (an SD card).
SYNC_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

COUNTER = "counter"
GAUGE = "gauge"
BY_QOS = ("qos", None)  # a family of three samples, from the keys KEY_qos0 .. KEY_qos2

# The /metrics family of each $SYS figure. $SYS and /metrics are generated
# from one table, common/broker/sys_topics.SYS_FIGURES (topic, snapshot
# key); this maps its keys to Prometheus names: key -> (family, type, help,
# label), label None or (label name, value). A figure missing here is still
# served, under a name made from its $SYS topic (generic), and
# tests/host/test_server_sys.py fails until it is named here.
FAMILIES = {
    "connected": ("siskin_clients_connected", GAUGE, "MQTT clients connected now", None),
    "sessions": (
        "siskin_sessions",
        GAUGE,
        "Sessions held: connected clients plus persistent sessions whose client is away",
        None,
    ),
    "clients_maximum": ("siskin_clients_connected_max", GAUGE, "Most clients connected at once since start", None),
    "refused_connections": (
        "siskin_connections_refused_total",
        COUNTER,
        "Connections closed at once: far beyond max_connections",
        None,
    ),
    "connections_total": ("siskin_connections_total", COUNTER, "Network connections accepted", None),
    "messages_received": ("siskin_messages_received", COUNTER, "PUBLISH packets received from clients, by QoS", BY_QOS),
    "messages_sent": ("siskin_messages_sent", COUNTER, "PUBLISH packets written to clients, by QoS", BY_QOS),
    **{
        key: (
            "siskin_messages_dropped",
            COUNTER,
            "Messages not delivered or not kept, by cause (docs/limits.md)",
            ("cause", cause),
        )
        for cause, key in DROP_COUNTERS
    },
    "refused_queue_full": (
        "siskin_messages_refused",
        COUNTER,
        "QoS 1/2 PUBLISHes refused because queues were full",
        ("cause", "queue_full"),
    ),
    "refused_queue_total": (
        "siskin_messages_refused",
        COUNTER,
        "QoS 1/2 PUBLISHes refused because queues were full",
        ("cause", "queue_total"),
    ),
    "refused_sparkplug": (
        "siskin_sparkplug_refused_total",
        COUNTER,
        "sparkplug_aware: PUBLISHes and wills refused (under $sparkplug/certificates/, malformed spBv1.0/ topics)",
        None,
    ),
    "closed_replay_stalled": (
        "siskin_replay_stalled_closes_total",
        COUNTER,
        "Clients closed because a retained replay's output did not drain (replay_stall_timeout)",
        None,
    ),
    "expired": ("siskin_messages_expired_total", COUNTER, "Messages whose v5 Message Expiry came before delivery", None),
    "denied_publish": ("siskin_acl_denied", COUNTER, "What the ACL refused", ("what", "publish")),
    "denied_delivery": ("siskin_acl_denied", COUNTER, "What the ACL refused", ("what", "delivery")),
    "denied_subscribe": ("siskin_acl_denied", COUNTER, "What the ACL refused", ("what", "subscribe")),
    "login_failed": (
        "siskin_login_failures_total",
        COUNTER,
        "Logins refused for a bad user name or password (MQTT CONNECT, HTTP basic auth)",
        None,
    ),
    "denied_takeover": (
        "siskin_takeovers_denied_total",
        COUNTER,
        "CONNECTs refused: their client id's session belongs to another user",
        None,
    ),
    "tls_failed": (
        "siskin_tls_failed_total",
        COUNTER,
        "TLS connections refused before MQTT: a failed or stalled handshake, or a refused certificate identity",
        None,
    ),
    "websocket_refused": (
        "siskin_websocket_refused_total",
        COUNTER,
        "WebSocket upgrades refused (HTTP 4xx) and WebSocket connections closed for bad frames",
        None,
    ),
    "closed_out_of_memory": (
        "siskin_out_of_memory_closes_total",
        COUNTER,
        "Clients closed because handling their packet ran out of heap (MemoryError; boards above all)",
        None,
    ),
    "closed_token_expired": (
        "siskin_token_expired_closes_total",
        COUNTER,
        "Clients closed because their JWT expired during the session (v5 DISCONNECT 0xA0)",
        None,
    ),
    "auth_offline_allowed": (
        "siskin_auth_offline_total",
        COUNTER,
        "CONNECTs the auth hook could not judge (unreachable): let in on a cached allow, or refused",
        ("decision", "allowed"),
    ),
    "auth_offline_refused": (
        "siskin_auth_offline_total",
        COUNTER,
        "CONNECTs the auth hook could not judge (unreachable): let in on a cached allow, or refused",
        ("decision", "refused"),
    ),
    "auth_offline_checks_allowed": (
        "siskin_auth_offline_checks_total",
        COUNTER,
        "PUBLISH/SUBSCRIBE checks the auth hook's acl_url could not judge (unreachable): allowed on a cached allow, or refused",
        ("decision", "allowed"),
    ),
    "auth_offline_checks_refused": (
        "siskin_auth_offline_checks_total",
        COUNTER,
        "PUBLISH/SUBSCRIBE checks the auth hook's acl_url could not judge (unreachable): allowed on a cached allow, or refused",
        ("decision", "refused"),
    ),
    "rate_held_messages": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "messages"),
    ),
    "rate_held_bytes": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "bytes"),
    ),
    "rate_held_subscribes": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "subscribes"),
    ),
    "rate_held_user_messages": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "user_messages"),
    ),
    "rate_held_user_bytes": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "user_bytes"),
    ),
    "rate_held_user_subscribes": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "user_subscribes"),
    ),
    "rate_held_listener_messages": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "listener_messages"),
    ),
    "rate_held_listener_bytes": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "listener_bytes"),
    ),
    "rate_held_listener_subscribes": (
        "siskin_rate_held_total",
        COUNTER,
        "Times a client was held back (not read) for going over a rate limit, by cause",
        ("cause", "listener_subscribes"),
    ),
    "refused_connect_rate": (
        "siskin_connect_rate_refused_total",
        COUNTER,
        "CONNECTs refused: their source address was over rate_connects (CONNACK 0x9F, 3.1.1 0x03)",
        None,
    ),
    "closed_rate_limited": (
        "siskin_rate_limited_closes_total",
        COUNTER,
        "Clients closed for staying over their rate limits for rate_grace seconds (v5 DISCONNECT 0x96)",
        None,
    ),
    "sn_malformed": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "malformed"),
    ),
    "sn_unknown_clients": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "unknown_client"),
    ),
    "sn_refused_connects": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "connect"),
    ),
    "sn_refused_subscriptions": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "subscribe"),
    ),
    "sn_topic_ids_refused": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "topic_ids"),
    ),
    "sn_unknown_topic_ids": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "unknown_topic_id"),
    ),
    "sn_keep_alive_lost": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "keep_alive"),
    ),
    "sn_retries_exhausted": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "retries"),
    ),
    "sn_wrong_state": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "wrong_state"),
    ),
    "sn_too_large": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "too_large"),
    ),
    "sn_unsealed": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "unsealed"),
    ),
    "sn_bad_seal": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "bad_seal"),
    ),
    "sn_replayed": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "replayed"),
    ),
    "sn_challenged": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "challenged"),
    ),
    "sn_wrong_key": (
        "siskin_mqttsn_refused_total",
        COUNTER,
        "MQTT-SN datagrams and requests refused, by cause (docs/mqtt-sn.md)",
        ("cause", "wrong_key"),
    ),
    "bytes_received": ("siskin_received_bytes_total", COUNTER, "Bytes read from MQTT clients", None),
    "bytes_sent": ("siskin_sent_bytes_total", COUNTER, "Bytes written to MQTT clients", None),
    "publish_bytes_received": (
        "siskin_publish_payload_received_bytes_total",
        COUNTER,
        "Payload bytes of the PUBLISHes received from MQTT clients",
        None,
    ),
    "publish_bytes_sent": (
        "siskin_publish_payload_sent_bytes_total",
        COUNTER,
        "Payload bytes of the PUBLISHes written to MQTT clients",
        None,
    ),
    "stored_bytes": (
        "siskin_message_slabs_payload_bytes",
        GAUGE,
        "Payload bytes of the messages held in memory (queued, in flight or retained; each once)",
        None,
    ),
    "subscriptions": ("siskin_subscriptions", GAUGE, "Subscriptions of all sessions", None),
    "retained": (
        "siskin_retained_messages",
        GAUGE,
        "Retained messages kept (the broker's own $SYS ones included)",
        None,
    ),
}

# Gauges of /metrics only: (metric name, help, snapshot key).
GAUGES = (
    ("siskin_message_slabs", "Messages held in memory (queued, in flight or retained; each kept once)", "messages"),
    (
        "siskin_queued_budget_bytes",
        "All queues as max_queued_total_bytes counts them (topic + payload + 512 per queued copy)",
        "queued_total",
    ),
)


def generic(suffix: str) -> tuple[str, str, str, None]:
    """The family of a $SYS figure FAMILIES does not name."""
    name = "siskin_sys_" + "".join(ch if ch.isalnum() else "_" for ch in suffix)
    return name, GAUGE, f"$SYS/broker/{suffix}", None


def sys_families(snap: dict[str, Any]) -> list[Metric]:
    """A family for every figure of sys_topics.SYS_FIGURES, from `snap` (broker.snapshot())."""
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for suffix, key in SYS_FIGURES:
        name, kind, text, label = FAMILIES.get(key) or generic(suffix)
        family = families.get(name)
        if family is None:
            labels = [label[0]] if label else None
            if kind == COUNTER:
                family = families[name] = CounterMetricFamily(name, text, labels=labels)
            else:
                family = families[name] = GaugeMetricFamily(name, text, labels=labels)
        if label is None:
            family.add_metric([], snap[key])
        elif label[1] is None:
            for qos in range(3):
                family.add_metric([str(qos)], snap[f"{key}_qos{qos}"])
        else:
            family.add_metric([label[1]], snap[key])
    return list(families.values())


# (metric name, help, Runner.status() key) of the bridges' figures, labelled by bridge.
BRIDGE_COUNTERS = (
    ("siskin_bridge_sent", "Messages the upstream acknowledged (QoS 0: written)", "sent"),
    ("siskin_bridge_received", "Messages from upstream stored here", "received"),
    ("siskin_bridge_dead_lettered", "Messages never to be delivered: counted, logged, skipped", "dead_lettered"),
    ("siskin_bridge_dropped", "QoS 0 messages going up while the upstream was away", "dropped"),
    ("siskin_bridge_retried", "Messages the upstream refused for now (quota), sent again later", "retried"),
    ("siskin_bridge_faults", "Faults the bridge's supervisor contained (each restarts the bridge)", "faults"),
)
BRIDGE_GAUGES = (
    ("siskin_bridge_queued_messages", "Messages waiting to go up (queued here plus held by the bridge)", "queued"),
    ("siskin_bridge_queued_bytes", "Topic + payload bytes waiting in the bridge's session here", "queued_bytes"),
    (
        "siskin_bridge_oldest_queued_age_seconds",
        "Age of the oldest message waiting to go up (at least; -1 none)",
        "oldest_queued_age",
    ),
    ("siskin_bridge_inflight_messages", "Messages sent up and not yet acknowledged", "inflight"),
    ("siskin_bridge_inflight_max", "The upstream window: max_inflight or its Receive Maximum (0 not connected)",
     "inflight_max"),
    ("siskin_bridge_last_ack_age_seconds", "Seconds since the upstream's last ack (-1 none yet)", "last_ack_age"),
    ("siskin_bridge_send_rate", "Messages acknowledged upstream per second (over the last sys_interval)", "send_rate"),
)  # fmt: skip


class BrokerCollector(Collector):
    """Reads the broker's counters at scrape time."""

    def __init__(
        self,
        broker: Broker,
        store_path: str | None,
        clock: Callable[[], int],
        bridges: Callable[[], Any] = list,
    ) -> None:
        self.broker = broker
        self.store_path = store_path  # the store's log file, or None without --data-dir
        self.clock = clock  # the driver's whole seconds (uptime)
        self.bridges = bridges  # the running bridges' Runners (common/bridge/runner.py), now

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        snap = broker.snapshot()
        yield InfoMetricFamily("siskin_build", "The broker's version", value={"version": VERSION})
        started = snap["started"]
        yield GaugeMetricFamily(
            "siskin_uptime_seconds", "Seconds since the broker started", value=self.clock() - (started or self.clock())
        )
        yield from sys_families(snap)
        for name, text, key in GAUGES:
            yield GaugeMetricFamily(name, text, value=snap[key])
        queued, size, inflight = admin.queues(broker)
        yield GaugeMetricFamily("siskin_queued_messages", "Messages waiting in the sessions' queues", value=queued)
        yield GaugeMetricFamily(
            "siskin_queued_bytes", "Topic + payload bytes waiting in the sessions' queues", value=size
        )
        yield GaugeMetricFamily(
            "siskin_inflight_messages", "QoS 1/2 messages sent and not yet acknowledged", value=inflight
        )
        yield from self.collect_bridges()
        yield from self.collect_listeners()
        size_now = store_size(self.store_path)
        if size_now is not None:
            yield GaugeMetricFamily("siskin_store_size_bytes", "Size of the store's log file on disk", value=size_now)
            yield CounterMetricFamily(
                "siskin_store_syncs", "Times the store was made durable (fsync)", value=broker.listener.syncs()
            )

    def collect_listeners(self) -> Iterator[Metric]:
        """Per listener (numbered from 1, as [[listener]] #N in the config's
        messages) whose clients were held back or refused: the rate holds by
        cause and the CONNECTs over rate_connects (the core's held_on and
        refused_on; listeners without any have no samples)."""
        from common.broker.rate_hold import CAUSES

        rates = self.broker.rates
        if rates is not None and rates.held_on:
            held = CounterMetricFamily(
                "siskin_listener_rate_held_total",
                "Times a client of the listener was held back for going over a rate limit, by cause",
                labels=["listener", "cause"],
            )
            for key in sorted(rates.held_on):
                for cause, count in enumerate(rates.held_on[key]):
                    if count:
                        held.add_metric([str(key + 1), CAUSES[cause][1].removeprefix("rate_held_")], count)
            yield held
        connect_rate = self.broker.connect_rate
        if connect_rate is not None and connect_rate.refused_on:
            refused = CounterMetricFamily(
                "siskin_listener_connect_rate_refused_total",
                "CONNECTs refused on the listener: their source address over its rate_connects",
                labels=["listener"],
            )
            for key in sorted(connect_rate.refused_on):
                refused.add_metric([str(key + 1)], connect_rate.refused_on[key])
            yield refused

    def collect_bridges(self) -> Iterator[Metric]:
        """Per [[bridge]], the figures of $SYS/broker/bridge/<name>/."""
        runners = self.bridges()
        if not runners:
            return
        label = ["bridge"]
        connected = GaugeMetricFamily(
            "siskin_bridge_connected", "1 while the bridge is connected to its upstream (stalled too)", labels=label
        )
        stalled = GaugeMetricFamily(
            "siskin_bridge_stalled", "1 while connected but an upstream ack is overdue (stall_timeout)", labels=label
        )
        gauges = [(GaugeMetricFamily(name, text, labels=label), key) for name, text, key in BRIDGE_GAUGES]
        counters = [(CounterMetricFamily(name, text, labels=label), key) for name, text, key in BRIDGE_COUNTERS]
        for runner in runners:
            status = runner.status()
            name = [status["name"]]
            state = status["state"]
            connected.add_metric(name, 1 if state in ("connected", "stalled") else 0)
            stalled.add_metric(name, 1 if state == "stalled" else 0)
            for family, key in gauges + counters:
                family.add_metric(name, status[key])
        yield connected
        yield stalled
        for family, _ in gauges + counters:
            yield family


def store_size(path: str | None) -> int | None:
    """Bytes of the store's log file, or None (no store, or not readable)."""
    if path is None:
        return None
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def registry(
    broker: Broker, store_path: str | None, clock: Callable[[], int], bridges: Callable[[], Any] = list
) -> CollectorRegistry:
    """A registry with the broker's metrics, the bridges' (`bridges()`: the
    running BridgeRunners), the process' and the store's sync time (when
    there is a store)."""
    reg = CollectorRegistry(auto_describe=True)
    reg.register(BrokerCollector(broker, store_path, clock, bridges))
    ProcessCollector(registry=reg)
    if store_path is not None:
        time_syncs(
            broker.listener,
            Histogram(
                "siskin_store_sync_seconds", "Time a store sync (fsync) took", buckets=SYNC_BUCKETS, registry=reg
            ),
        )
    return reg


def time_syncs(listener: Any, histogram: Histogram) -> None:
    """Make `listener.sync()` record how long each sync that wrote something took."""
    sync = listener.sync

    def timed() -> None:
        before = listener.syncs()
        started = time.perf_counter()
        sync()
        if listener.syncs() != before:
            histogram.observe(time.perf_counter() - started)

    listener.sync = timed
