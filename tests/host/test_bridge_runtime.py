"""Bridges changed while the broker runs and their health
in view: `siskin ctl bridge list|add|remove|pause|resume` through
the HTTP API, SIGHUP picking up [[bridge]] changes without losing a queued
message, a removed bridge's queue dead-lettered with a count (at run time
and at start), and the link's figures in $SYS, /metrics and the API.
Against a real Mosquitto (tests/host/test_bridge_mosquitto.py's fixture).
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.host.bridge_edge import RULES, drain, paho
from tests.host.broker_proc import BrokerProcess, Paho, run_cli, wait_until, write_config
from tests.host.test_bridge_mosquitto import mosquitto
from tools.bench.brokers import Mosquitto

pytestmark = pytest.mark.interop
__all__ = ["mosquitto"]  # the fixture


def table(port: int, name: str = "cloud", **over: Any) -> dict[str, Any]:
    t: dict[str, Any] = {
        "name": name,
        "addresses": [f"127.0.0.1:{port}"],
        "client_id": "edge-" + name,
        "keepalive": 1,
        "connect_timeout": 1.0,
        "backoff_min": 0.2,
        "backoff_max": 1.0,
        "topic": RULES,
    }
    t.update(over)
    return t


def ctl(siskin: BrokerProcess, *args: str) -> str:
    r = run_cli("ctl", "--url", siskin.http_url(), *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def sighup(siskin: BrokerProcess, bridges: list[dict[str, Any]]) -> None:
    write_config(siskin.config_path, {"sys_interval": 0}, http={"port": 0}, bridges=bridges)
    assert siskin.proc is not None
    siskin.proc.send_signal(signal.SIGHUP)


def test_ctl_bridge_list_pause_resume_remove_add(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    cloud_sub = paho(mosquitto.port, clients, "consumer")
    cloud_sub.subscribe("edge1/#", 1)
    with BrokerProcess(tmp_path, {"sys_interval": 0}, http={"port": 0}, bridges=[table(mosquitto.port)]) as siskin:
        siskin.wait_log("bridge cloud: connected to", 15)
        listing = ctl(siskin, "bridge", "list")
        assert "cloud" in listing and "connected" in listing, listing
        dev = paho(siskin.port, clients, "dev")
        ctl(siskin, "bridge", "pause", "cloud")
        assert " paused " in ctl(siskin, "bridge", "list")
        for i in range(5):
            dev.publish("up/p", b"%d" % i, 1)  # acknowledged here; waiting
        cloud_sub.get_nothing(0.5)
        ctl(siskin, "bridge", "resume", "cloud")
        assert drain(cloud_sub, 5) == [b"%d" % i for i in range(5)]
        # Removed with 3 waiting: dead-lettered with a count, the session gone.
        ctl(siskin, "bridge", "pause", "cloud")
        for i in range(3):
            dev.publish("up/r", b"%d" % i, 1)
        out = ctl(siskin, "bridge", "remove", "cloud")
        assert "removed, 3 queued message(s) dead-lettered" in out, out
        siskin.wait_log(r"bridge cloud removed: its session siskin-bridge-cloud ended, 3 queued message\(s\) dead-lettered")
        assert "siskin-bridge-cloud" not in ctl(siskin, "sessions")
        assert ctl(siskin, "bridge", "list").strip() == "no bridges"
        # Added again from a TOML file.
        path = write_config(tmp_path / "extra.toml", bridges=[table(mosquitto.port)])
        assert "bridge cloud: started" in ctl(siskin, "bridge", "add", str(path))
        wait_until(lambda: siskin.log_text().count("bridge cloud: connected to") >= 2 or None, 15, siskin.log_text)
        dev.publish("up/again", b"again", 1)
        assert cloud_sub.get(10).payload == b"again"
        r = run_cli("ctl", "--url", siskin.http_url(), "bridge", "pause", "nosuch")
        assert r.returncode == 1 and "no bridge named 'nosuch'" in r.stderr


def test_sighup_picks_up_bridge_changes_without_losing_a_queued_message(
    tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]
) -> None:
    cloud_sub = paho(mosquitto.port, clients, "consumer", clean=False)
    cloud_sub.subscribe("edge1/#", 1)
    with BrokerProcess(tmp_path, {"sys_interval": 0}, http={"port": 0}, bridges=[table(mosquitto.port)]) as siskin:
        siskin.wait_log("bridge cloud: connected to", 15)
        dev = paho(siskin.port, clients, "dev")
        os.kill(mosquitto.pid, signal.SIGSTOP)  # away: what is published now waits here
        try:
            siskin.wait_log(r"bridge cloud: connection to \S+ lost", 10)
            n = 40
            for i in range(n):
                dev.publish("up/h", b"%d" % i, 1)
            # cloud changed (keepalive), other added.
            other = table(mosquitto.port, "other", topic=[{"pattern": "#", "direction": "out", "local_prefix": "o/"}])
            sighup(siskin, [table(mosquitto.port, keepalive=2), other])
            siskin.wait_log(r"SIGHUP: reloaded .*bridges: added other; changed cloud")
        finally:
            os.kill(mosquitto.pid, signal.SIGCONT)
        assert drain(cloud_sub, n, 30) == [b"%d" % i for i in range(n)]  # the queue went on to the new one
        siskin.wait_log("bridge other: connected to", 15)

        def cloud_acknowledged() -> bool:
            # The consumer has them all once Mosquitto delivered them; the bridge's
            # queue is empty only once Mosquitto's PUBACKs came back too.
            listing = json.loads(ctl(siskin, "--json", "bridge", "list"))["bridges"]
            (cloud,) = [b for b in listing if b["name"] == "cloud"]
            return cloud["queued"] == 0 and cloud["inflight"] == 0

        wait_until(cloud_acknowledged, 30, "the cloud bridge's queue never emptied")
        sighup(siskin, [other])
        siskin.wait_log(r"bridges: removed cloud; 0 queued message\(s\) of the removed dead-lettered")
        assert "Traceback" not in siskin.log_text()


def queue_four_while_the_upstream_stalls(broker: BrokerProcess, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    """Start `broker`, let its bridge connect, stall the upstream, publish 4
    QoS 1 messages for it (they stay queued in its session) and stop it."""
    with broker:
        broker.wait_log("bridge cloud: connected to", 15)
        os.kill(mosquitto.pid, signal.SIGSTOP)
        try:
            broker.wait_log(r"bridge cloud: connection to \S+ lost", 15)
            dev = paho(broker.port, clients, "dev")
            for i in range(4):
                dev.publish("up/s", b"%d" % i, 1)
            assert broker.stop() == 0
        finally:
            os.kill(mosquitto.pid, signal.SIGCONT)


def test_a_removed_bridges_queue_is_dead_lettered_at_start(
    tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]
) -> None:
    siskin = BrokerProcess(tmp_path, {"sys_interval": 0}, bridges=[table(mosquitto.port)])
    queue_four_while_the_upstream_stalls(siskin, mosquitto, clients)
    write_config(siskin.config_path, {"sys_interval": 0})  # the bridge is gone from the config
    with siskin:
        siskin.wait_log(r"bridge cloud removed: its session siskin-bridge-cloud ended, 4 queued message\(s\) dead-lettered")


def test_link_health_in_sys_metrics_and_the_api(tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]) -> None:
    from tests.host.test_web import scrape

    bridges = [table(mosquitto.port)]
    with BrokerProcess(tmp_path, {"sys_interval": 1}, http={"port": 0}, bridges=bridges) as siskin:
        siskin.wait_log("bridge cloud: connected to", 15)
        dev = paho(siskin.port, clients, "dev")
        dev.publish("up/h", b"1", 1)
        watch = paho(siskin.port, clients, "watch")
        watch.subscribe("$SYS/broker/bridge/cloud/#", 0)
        keys = {"oldest_queued_age", "inflight", "inflight_max", "last_ack_age", "send_rate", "retried", "faults"}
        values: dict[str, bytes] = {}
        while not keys <= set(values) or values.get("last_ack_age") in (None, b"-"):
            m = watch.get(10)
            values[m.topic.rsplit("/", 1)[1]] = m.payload
        assert values["inflight_max"] == b"20"  # max_inflight (3.1.1: no Receive Maximum from the upstream)
        status = ctl(siskin, "--json", "bridge", "list")
        assert '"inflight_max"' in status and '"oldest_queued_age"' in status
        m = scrape(siskin.http_url())
        assert m[("siskin_bridge_inflight_max", (("bridge", "cloud"),))] > 0
        assert ("siskin_bridge_oldest_queued_age_seconds", (("bridge", "cloud"),)) in m
        assert m[("siskin_bridge_stalled", (("bridge", "cloud"),))] == 0
        # ... and on the status page (the API it polls).
        page = json.loads(urllib.request.urlopen(siskin.http_url() + "/api/status", timeout=10).read())
        assert [(b["name"], b["state"]) for b in page["bridges"]] == [("cloud", "connected")]
        # A clean shutdown: the broker's DISCONNECT 0x8B to the bridge's session is no error.
        assert siskin.stop() == 0
        assert not re.search(r"\bERROR\b", siskin.log_text()), siskin.log_text()


def test_a_removed_bridges_queue_is_dead_lettered_at_start_on_a_board(
    tmp_path: Path, mosquitto: Mosquitto, clients: list[Paho]
) -> None:
    # The same on the firmware (common/startup.py's restore runs on both):
    # a board whose config lost its bridge ends the bridge's stored session
    # instead of queueing for no one.
    from tests.host.test_firmware_bridge_tls import board_bridge
    from tests.host.upy_broker_proc import BRIDGE_HEAP, UpyBrokerProcess

    board = UpyBrokerProcess(tmp_path, heap=BRIDGE_HEAP, device={"bridge": [board_bridge(mosquitto.port)]})
    queue_four_while_the_upstream_stalls(board, mosquitto, clients)
    device = json.loads(board.config_path.read_text())
    device["bridge"] = []  # the bridge is gone from the device config
    board.config_path.write_text(json.dumps(device))
    with board:
        board.wait_log(r"bridge cloud removed: its session siskin-bridge-cloud ended, 4 queued message\(s\) dead-lettered")
        assert board.stop() == 0
    with board:  # and it stays gone (each start writes a new log)
        assert board.stop() == 0
    assert "bridge cloud removed" not in board.log_text(), board.log_text()
