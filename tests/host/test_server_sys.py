"""$SYS/broker/... topics published by the host (sys_interval = 1)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from common.broker.sys_topics import SYS_FIGURES
from tests.host.broker_proc import BrokerProcess, Paho, RawClient

pytestmark = pytest.mark.interop

TOPICS = (
    "version",
    "uptime",
    "clients/connected",
    "clients/total",
    "clients/maximum",
    "messages/received",
    "messages/sent",
    "messages/dropped",
    "messages/dropped/qos0",
    "messages/dropped/queue_full",
    "messages/dropped/queue_total",
    "messages/refused/queue_full",
    "messages/refused/queue_total",
    "bytes/received",
    "bytes/sent",
    "subscriptions/count",
    "retained messages/count",
    "heap/current",
    "clients/active",
    "clients/inactive",
    "clients/disconnected",
    "publish/messages/received",
    "publish/messages/sent",
    "publish/messages/dropped",
    "messages/stored",
    "store/messages/count",
)


def collect_until(sub: Paho, done: object, timeout: float = 6.0) -> dict[str, str]:
    """Latest value of each $SYS/broker/ topic, once done(values) holds."""
    values: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            m = sub.get(timeout=max(0.05, deadline - time.monotonic()))
        except AssertionError:
            break
        values[m.topic.removeprefix("$SYS/broker/")] = m.payload.decode()
        if done(values):  # type: ignore[operator]
            return values
    raise AssertionError(f"$SYS never reached the expected values: {values}")


def test_sys_topics_plausible(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, limits={"sys_interval": 1}) as b:
        sub = Paho(b.port, "sys-sub").connect()
        others = [Paho(b.port, f"sys-{i}").connect() for i in range(2)]
        offline = Paho(b.port, "sys-offline", clean=False).connect()
        offline.subscribe("sys/t", 1)
        offline.close()  # a persistent session whose client is away
        try:
            others[0].subscribe("sys/t", 0)
            for i in range(10):
                others[1].publish("sys/t", b"%d" % i, 1)
            others[1].publish("sys/retained", b"kept", 0, retain=True)
            sub.subscribe("$SYS/broker/#", 0)

            def settled(v: dict[str, str]) -> bool:
                return (
                    all(t in v for t in TOPICS)
                    and v["clients/connected"] == "3"
                    and int(v["messages/received"]) >= 11
                    # every $SYS topic is itself retained, plus sys/retained
                    and int(v["retained messages/count"]) == len(v) + 1
                    # (Mosquitto's names come later in a round: that round's, too)
                    and v["clients/active"] == "3"
                    and v["clients/inactive"] == v["clients/disconnected"] == "1"
                    and v["publish/messages/received"] == v["messages/received"]
                    and v["publish/messages/sent"] == v["messages/sent"]
                    and v["store/messages/count"] == v["messages/stored"]
                )

            v = collect_until(sub, settled)
            assert v["version"].startswith("siskin ")
            assert v["uptime"].endswith(" seconds") and 0 <= int(v["uptime"].split()[0]) < 60  # as Mosquitto
            # Mosquitto's names for the same figures.
            assert v["clients/active"] == v["clients/connected"] == "3"
            assert v["clients/inactive"] == v["clients/disconnected"] == "1"  # the offline session
            assert v["publish/messages/received"] == v["messages/received"]
            assert v["publish/messages/sent"] == v["messages/sent"]
            assert v["publish/messages/dropped"] == v["messages/dropped"]
            assert v["store/messages/count"] == v["messages/stored"] and int(v["messages/stored"]) >= 1
            assert v["clients/total"] == "4"  # 3 connected + the offline persistent session
            assert int(v["clients/maximum"]) >= 4
            assert v["subscriptions/count"] == "3"  # sys-0, sys-offline, and $SYS/broker/# itself
            assert int(v["messages/sent"]) >= 10  # sys-0 got 10; the offline session queued up to 10
            assert int(v["bytes/received"]) > 100
            assert int(v["bytes/sent"]) > 50
            assert v["messages/dropped"] == "0"
            assert 1_000_000 < int(v["heap/current"]) < 500_000_000  # RSS in bytes

            # Uptime advances and the values follow the clients.
            others[0].close()
            v2 = collect_until(sub, lambda v: v.get("clients/connected") == "2")
            assert int(v2["uptime"].split()[0]) >= int(v["uptime"].split()[0])
        finally:
            for o in others:
                if not o.disconnected.is_set():
                    o.close()
            sub.close()


def test_sys_off(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, limits={"sys_interval": 0}) as b:
        sub = Paho(b.port, "sys-off").connect()
        try:
            sub.subscribe("$SYS/#", 0)
            sub.get_nothing(1.3)
        finally:
            sub.close()


def test_sys_not_matched_by_hash(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path, limits={"sys_interval": 1}) as b:
        c = RawClient(b.port)
        c.connect("hash")
        assert c.subscribe("#", 0) == 0
        # $SYS topics are not matched by a wildcard in the first level [MQTT-4.7.2-1].
        with pytest.raises(TimeoutError):
            pkt = c.read_packet(timeout=1.5)
            pytest.fail(f"got a message on '#': {pkt!r}")
        c.close()


def test_every_sys_figure_has_its_metrics_family(tmp_path: Path) -> None:
    """$SYS and /metrics come from one table (sys_topics.SYS_FIGURES): each
    figure published under $SYS/broker/ is served by /metrics under its own
    name (FAMILIES), with the value $SYS shows for the counters that stand
    still meanwhile (tls_failed and denied_takeover were once missing)."""
    from cpython_host.operations.metrics import FAMILIES
    from tests.host.test_web import scrape

    unnamed = [suffix for suffix, key in SYS_FIGURES if key not in FAMILIES]
    assert not unnamed, f"$SYS figures without a /metrics name (cpython_host/operations/metrics.py FAMILIES): {unnamed}"
    with BrokerProcess(tmp_path, limits={"sys_interval": 1}, http={"port": 0}) as b:
        url = b.http_url()
        sub = Paho(b.port, "sys-sub").connect()
        try:
            sub.subscribe("$SYS/broker/#", 0)
            values = collect_until(sub, lambda v: all(suffix in v for suffix, _ in SYS_FIGURES))
            samples = scrape(url)
        finally:
            sub.close()
    for suffix, key in SYS_FIGURES:
        name, kind, _help, label = FAMILIES[key]
        name = name.removesuffix("_total") + ("_total" if kind == "counter" else "")
        if label is None:
            keys = [(name, ())]
        elif label[1] is None:
            keys = [(name, (("qos", str(q)),)) for q in range(3)]
        else:
            keys = [(name, ((label[0], label[1]),))]
        for k in keys:
            assert k in samples, (suffix, k)
        if key in ("tls_failed", "denied_takeover", "login_failed", "refused_connections"):
            assert samples[keys[0]] == float(values[suffix]), (suffix, samples[keys[0]], values[suffix])


def test_mosquitto_load_averages_and_payload_bytes(tmp_path: Path) -> None:
    """Mosquitto's load/ averages, publish/bytes/* and store/messages/bytes,
    read by a real subscriber from a running broker (docs/host.md)."""
    from common.broker.sys_load import HORIZONS, LOAD_FIGURES

    load_topics = [f"load/{name}/{h}" for name, _ in LOAD_FIGURES for h, _ in HORIZONS]
    with BrokerProcess(tmp_path, limits={"sys_interval": 1}) as b:
        sub = Paho(b.port, "sys-sub").connect()
        dev = Paho(b.port, "dev").connect()
        reader = Paho(b.port, "reader").connect()
        try:
            reader.subscribe("m/#", 1)
            dev.publish("m/kept", b"x" * 100, 1, retain=True)
            for i in range(10):
                dev.publish(f"m/{i}", b"y" * 10, 1)
            for _ in range(11):
                reader.get()
            sub.subscribe("$SYS/broker/#", 0)

            def settled(v: dict[str, str]) -> bool:
                return (
                    all(t in v for t in load_topics)
                    and v.get("publish/bytes/received") == "200"
                    and int(v.get("publish/bytes/sent", "0")) >= 200  # (and the $SYS values to sys-sub)
                    # (a whole round with the traffic: each figure, each horizon)
                    and all(float(v[t]) > 0 for t in load_topics if "dropped" not in t)
                )

            v = collect_until(sub, settled, timeout=10.0)
            # Held: the retained 100 bytes, and the $SYS values themselves.
            assert int(v["store/messages/bytes"]) >= 100
            assert float(v["load/messages/received/1min"]) == float(v["load/publish/received/1min"])
            assert float(v["load/bytes/received/1min"]) > 200 * (1 - 2.72 ** (-1 / 60))  # packets, not payloads
            assert float(v["load/connections/1min"]) > 0
            assert v["load/publish/dropped/1min"] == "0.00"
            for t in load_topics:
                whole, _, cents = v[t].partition(".")
                assert whole.isdigit() and len(cents) == 2, (t, v[t])  # "12.34", as Mosquitto
        finally:
            for c in (sub, dev, reader):
                c.close()


def test_host_doc_names_mosquittos_figures() -> None:
    from common.broker.sys_load import HORIZONS, LOAD_FIGURES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "host.md").read_text()
    names = [f"`{name}`" for name, _ in LOAD_FIGURES] + [f"`/{h}`" for h, _ in HORIZONS[1:]]
    mosquittos = ("publish_bytes_received", "publish_bytes_sent", "stored_bytes")
    names += [f"`$SYS/broker/{s}`" for s, key in SYS_FIGURES if key in mosquittos]
    missing = [n for n in names if n not in doc]
    assert not missing, f"docs/host.md's $SYS section does not name {missing}"
