"""The real host server against mosquitto_pub / mosquitto_sub (MQTT 3.1.1).

The binaries come from the Debian package mosquitto-clients. Without them
these tests skip, or fail under SISKIN_REQUIRE_ALL=1 (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require, tool_path
from tests.host.broker_proc import BrokerProcess, Paho

pytestmark = pytest.mark.interop

HINT = "apt-get install mosquitto-clients"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("mosq"), limits={"sys_interval": 1}) as b:
        yield b
        assert b.alive(), b.log_text()
        assert "Traceback" not in b.log_text(), b.log_text()  # no core error was contained


@pytest.fixture
def mosquitto_pub() -> str:
    path = tool_path("mosquitto_pub")
    require("mosquitto_pub", path, HINT)
    assert path is not None
    return path


@pytest.fixture
def mosquitto_sub() -> str:
    path = tool_path("mosquitto_sub")
    require("mosquitto_sub", path, HINT)
    assert path is not None
    return path


def run(cmd: list[str], timeout: float = 10, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}: {proc.stderr}"
    return proc


def common_args(broker: BrokerProcess) -> list[str]:
    return ["-h", "127.0.0.1", "-p", str(broker.port), "-V", "mqttv311"]


def test_retained_with_sub_count(broker: BrokerProcess, mosquitto_pub: str, mosquitto_sub: str) -> None:
    for i, qos in enumerate((0, 1, 2)):
        run([mosquitto_pub, *common_args(broker), "-t", f"mret/{i}", "-m", f"value {i}", "-r", "-q", str(qos)])
    out = run([mosquitto_sub, *common_args(broker), "-t", "mret/#", "-C", "3", "-v", "-W", "5"]).stdout
    assert sorted(out.splitlines()) == ["mret/0 value 0", "mret/1 value 1", "mret/2 value 2"]


@contextlib.contextmanager
def subscribed(mosquitto_sub: str, broker: BrokerProcess, args: list[str]) -> Iterator[subprocess.Popen[str]]:
    """A running `mosquitto_sub ARGS` whose SUBSCRIBE is in place (once the
    broker's $SYS subscription count, published every second, goes up);
    killed on the way out if it has not finished."""
    probe = Paho(broker.port, "sub-probe").connect()
    try:
        probe.subscribe("$SYS/broker/subscriptions/count", 0)
        baseline = int(probe.get().payload)  # retained: the latest value at once
        sub = subprocess.Popen(
            [mosquitto_sub, *common_args(broker), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            while int(probe.get(timeout=5).payload) <= baseline:
                pass
            yield sub
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait()
    finally:
        probe.close()


def test_live_messages_with_sub_count(broker: BrokerProcess, mosquitto_pub: str, mosquitto_sub: str) -> None:
    with subscribed(mosquitto_sub, broker, ["-t", "mlive/t", "-q", "1", "-C", "5", "-W", "10"]) as sub:
        lines = "".join(f"line {i}\n" for i in range(5))
        run([mosquitto_pub, *common_args(broker), "-t", "mlive/t", "-q", "1", "-l"], stdin=lines)
        out, err = sub.communicate(timeout=10)
    assert sub.returncode == 0, err
    assert out.splitlines() == [f"line {i}" for i in range(5)]  # in order [MQTT-4.6.0-2]


def test_qos2_from_mosquitto_pub_to_paho(broker: BrokerProcess, mosquitto_pub: str) -> None:
    sub = Paho(broker.port, "mq2-sub").connect()
    try:
        sub.subscribe("mq2/t", 2)
        run([mosquitto_pub, *common_args(broker), "-t", "mq2/t", "-m", "exactly once", "-q", "2"])
        m = sub.get()
        assert (m.payload, m.qos) == (b"exactly once", 2)
        sub.get_nothing()
    finally:
        sub.close()


def test_paho_to_mosquitto_sub(broker: BrokerProcess, mosquitto_sub: str) -> None:
    pub = Paho(broker.port, "mq-paho-pub").connect()
    try:
        pub.publish("mqp/t", b"from paho", 1, retain=True)
        out = run([mosquitto_sub, *common_args(broker), "-t", "mqp/t", "-C", "1", "-q", "1", "-W", "5"]).stdout
        assert out == "from paho\n"
    finally:
        pub.close()


def test_sys_with_mosquitto_sub(broker: BrokerProcess, mosquitto_sub: str) -> None:
    out = run(
        [
            mosquitto_sub,
            *common_args(broker),
            "-t",
            "$SYS/broker/version",
            "-t",
            "$SYS/broker/uptime",
            "-C",
            "2",
            "-v",
            "-W",
            "5",
        ]
    ).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["$SYS/broker/version"].startswith("siskin ")
    assert lines["$SYS/broker/uptime"].endswith(" seconds") and int(lines["$SYS/broker/uptime"].split()[0]) >= 0


def test_mosquitto_pub_to_sys_refused(broker: BrokerProcess, mosquitto_pub: str, mosquitto_sub: str) -> None:
    run([mosquitto_pub, *common_args(broker), "-t", "$SYS/broker/version", "-m", "forged", "-r", "-q", "1"])
    out = run([mosquitto_sub, *common_args(broker), "-t", "$SYS/broker/version", "-C", "1", "-W", "5"]).stdout
    assert out.startswith("siskin ")


@pytest.mark.parametrize("settings", [None, "boards/linux.toml", "boards/rpi.toml"])
def test_burst_to_mosquitto_sub_arrives_whole(tmp_path: Path, mosquitto_sub: str, settings: str | None) -> None:
    # `mosquitto_sub -q 1 -t '#'` while a publisher sends 10,000 QoS 1
    # messages as fast as it can (1,000 in flight): once it got 1,016-1,371
    # of them with the built-in defaults. The publisher is throttled, not
    # thinned: all arrive, in order [MQTT-4.6.0-2], with every host settings file.
    count = 10000
    with BrokerProcess(tmp_path, limits={"sys_interval": 1}, log_level="info", base=settings) as b:
        pub = Paho.fast_publisher(b.port, "burst-pub")
        try:
            with subscribed(mosquitto_sub, b, ["-t", "#", "-q", "1", "-C", str(count), "-W", "90"]) as sub:
                infos = [pub.client.publish("mburst/x", b"%d" % i, 1) for i in range(count)]
                out, err = sub.communicate(timeout=90)
                for info in infos:
                    info.wait_for_publish(30)
        finally:
            pub.close()
        assert sub.returncode == 0, err
        assert out.splitlines() == [str(i) for i in range(count)]
        for words in ("queue full", "queues full", "held back"):
            assert words not in b.log_text()
