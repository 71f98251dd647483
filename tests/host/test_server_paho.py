"""The real host server against paho-mqtt 2.2 clients (MQTT 3.1.1) and raw sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host.broker_proc import (
    DISCONNECT,
    BrokerProcess,
    Paho,
    RawClient,
    parse_publish,
    puback_packet,
    publish_packet,
)
from tests.host.conftest import RUNTIMES, runtime_args

pytestmark = pytest.mark.interop


# Every test runs on each runtime the host supports: CPython on both event
# loops (--event-loop), PyPy.
@pytest.fixture(scope="module", params=RUNTIMES)
def broker(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    args = runtime_args(request.param)
    with BrokerProcess(tmp_path_factory.mktemp("paho"), limits={"sys_interval": 0}, **args) as b:
        b.wait_log(f"event loop: {args['extra_args'][1]}")
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()  # no core error was contained


def paho(broker: BrokerProcess, clients: list[Paho], client_id: str = "", clean: bool = True) -> Paho:
    c = Paho(broker.port, client_id, clean)
    clients.append(c)
    return c.connect()


# [MQTT-7.0.0-2] a stock client, no extension; [MQTT-7.1.1-1] over TCP
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_round_trip(broker: BrokerProcess, clients: list[Paho], qos: int) -> None:
    sub = paho(broker, clients, f"sub-{qos}")
    assert sub.subscribe(f"rt/{qos}/#", qos)[0].value == qos  # granted QoS
    pub = paho(broker, clients, f"pub-{qos}")
    for i in range(5):
        pub.publish(f"rt/{qos}/x", b"m%d" % i, qos)
    got = [sub.get() for _ in range(5)]
    assert [m.payload for m in got] == [b"m%d" % i for i in range(5)]  # order kept [MQTT-4.6.0-6]
    assert {m.qos for m in got} == {qos}
    assert not any(m.retain for m in got)


def test_qos_downgraded_to_granted(broker: BrokerProcess, clients: list[Paho]) -> None:
    sub = paho(broker, clients, "down")
    sub.subscribe("down/t", 0)
    paho(broker, clients, "down-pub").publish("down/t", b"x", 2)
    assert sub.get().qos == 0  # [MQTT-3.8.4-6]


def test_retained(broker: BrokerProcess, clients: list[Paho]) -> None:
    pub = paho(broker, clients, "ret-pub")
    pub.publish("ret/a", b"first", 1, retain=True)
    pub.publish("ret/a", b"second", 1, retain=True)  # replaces [MQTT-3.3.1-5]
    sub = paho(broker, clients, "ret-sub")
    sub.subscribe("ret/#", 1)
    m = sub.get()
    assert (m.topic, m.payload, m.retain) == ("ret/a", b"second", True)
    sub.get_nothing()
    pub.publish("ret/a", b"live", 1, retain=True)
    m = sub.get()
    assert (m.payload, m.retain) == (b"live", False)  # live delivery: retain flag off [MQTT-3.3.1-9]
    pub.publish("ret/a", b"", 1, retain=True)  # clears [MQTT-3.3.1-10]
    sub.get()
    late = paho(broker, clients, "ret-late")
    late.subscribe("ret/#", 1)
    late.get_nothing()


def test_will_on_abrupt_close(broker: BrokerProcess, clients: list[Paho]) -> None:
    watcher = paho(broker, clients, "will-watch")
    watcher.subscribe("will/#", 1)
    raw = RawClient(broker.port)
    assert raw.connect("will-raw", will=("will/raw", b"gone", 1, False)) == b"\x00\x00"
    raw.close()  # no DISCONNECT [MQTT-3.1.2-8]
    m = watcher.get()
    assert (m.topic, m.payload, m.qos) == ("will/raw", b"gone", 1)


def test_no_will_after_disconnect(broker: BrokerProcess, clients: list[Paho]) -> None:
    watcher = paho(broker, clients, "nowill-watch")
    watcher.subscribe("nowill/#", 0)
    raw = RawClient(broker.port)
    raw.connect("nowill-raw", will=("nowill/raw", b"gone", 0, False))
    raw.send(DISCONNECT)
    assert raw.closed_within(3)
    raw.close()
    watcher.get_nothing(0.5)  # [MQTT-3.14.4-3]


def test_offline_queue_delivered_on_reconnect(broker: BrokerProcess, clients: list[Paho]) -> None:
    sub = paho(broker, clients, "persist", clean=False)
    sub.subscribe("persist/#", 1)
    sub.close()
    clients.remove(sub)
    pub = paho(broker, clients, "persist-pub")
    for i in range(5):
        pub.publish("persist/x", b"%d" % i, 1)
    again = paho(broker, clients, "persist", clean=False)
    assert again.session_present is True  # [MQTT-3.2.2-2]
    assert [again.get().payload for _ in range(5)] == [b"%d" % i for i in range(5)]
    # A clean session discards it [MQTT-3.1.2-6].
    again.close()
    clients.remove(again)
    fresh = paho(broker, clients, "persist", clean=True)
    assert fresh.session_present is False
    pub.publish("persist/x", b"after", 1)
    fresh.get_nothing()


def test_unacknowledged_redelivered_with_dup(broker: BrokerProcess) -> None:
    raw = RawClient(broker.port)
    raw.connect("redeliver", clean=False)
    assert raw.subscribe("redeliver/#", 1) == 1
    pub = RawClient(broker.port)
    pub.connect("redeliver-pub")
    pub.send(publish_packet("redeliver/a", b"one", 1, packet_id=7))
    assert pub.read_packet() == (0x40, b"\x00\x07")  # PUBACK
    pub.send(publish_packet("redeliver/a", b"two", 1, packet_id=8))
    assert pub.read_packet() == (0x40, b"\x00\x08")
    first = raw.read_packet()
    second = raw.read_packet()
    assert first is not None and second is not None
    t1 = parse_publish(*first)
    t2 = parse_publish(*second)
    assert (t1[1], t1[4], t2[1], t2[4]) == (b"one", False, b"two", False)
    raw.close()  # never acknowledged
    raw2 = RawClient(broker.port)
    assert raw2.connect("redeliver", clean=False)[0] == 1  # session present
    got = []
    for _ in range(2):
        pkt = raw2.read_packet()
        assert pkt is not None
        got.append(parse_publish(*pkt))
    # Resent with DUP, same packet ids, original order [MQTT-4.4.0-1] [MQTT-3.3.1-1].
    assert [(g[1], g[4], g[5]) for g in got] == [(b"one", True, t1[5]), (b"two", True, t2[5])]
    for g in got:
        raw2.send(puback_packet(g[5]))
    raw2.send(DISCONNECT)
    raw2.close()
    pub.close()


def test_takeover(broker: BrokerProcess, clients: list[Paho]) -> None:
    first = paho(broker, clients, "twin")
    first.subscribe("twin/t", 0)
    second = paho(broker, clients, "twin")
    assert first.disconnected.wait(5)  # [MQTT-3.1.4-2]
    second.subscribe("twin/t", 0)
    paho(broker, clients, "twin-pub").publish("twin/t", b"hello", 1)
    assert second.get().payload == b"hello"


def test_many_clients_fan_out(broker: BrokerProcess, clients: list[Paho]) -> None:
    subs = [paho(broker, clients, f"fan-{i}") for i in range(10)]
    for s in subs:
        s.subscribe("fan/+", 1)
    pub = paho(broker, clients, "fan-pub")
    for i in range(20):
        pub.publish("fan/x", b"%d" % i, 1)
    for s in subs:
        assert [s.get().payload for _ in range(20)] == [b"%d" % i for i in range(20)]


def test_ping_keeps_alive(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as b:
        c = Paho(b.port, "pinger", keep_alive=1).connect()
        try:
            import time

            time.sleep(2.6)  # paho pings every second; 1.5 s without a packet would close it
            assert not c.disconnected.is_set()
            c.subscribe("ping/t", 0)
        finally:
            c.close()


@pytest.mark.parametrize(("settings", "count"), [(None, 50000), ("boards/linux.toml", 50000), ("boards/rpi.toml", 20000)])
def test_burst_to_an_online_subscriber_arrives_whole(tmp_path: Path, settings: str | None, count: int) -> None:
    # A paho publisher with 1,000 QoS 1 messages in flight outruns a paho
    # QoS 1 subscriber (16 unacknowledged at a time). The broker stops
    # reading the publisher while the subscriber's queue is past its
    # high-water mark, instead of acknowledging messages it then drops:
    # every one arrives, in order [MQTT-4.6.0-2] (ordered per topic), none
    # is dropped, with the built-in defaults and every shipped host file
    # (boards/linux.toml once lost 28,960 of such a 50,000 burst).
    with BrokerProcess(tmp_path, limits={"sys_interval": 0}, log_level="info", base=settings) as b:
        sub = Paho(b.port, "burst-sub").connect()
        pub = Paho.fast_publisher(b.port, "burst-pub")
        try:
            sub.subscribe("burst/#", 1)
            infos = [pub.client.publish("burst/x", b"%d" % i, 1) for i in range(count)]
            got = [int(sub.get(timeout=30).payload) for _ in range(count)]
            for info in infos:
                info.wait_for_publish(30)
            assert got == list(range(count))
            sub.get_nothing(0.5)
            for words in ("queue full", "queues full", "held back"):  # nothing dropped, refused, stalled 30 s
                assert words not in b.log_text()
        finally:
            sub.close()
            pub.close()
