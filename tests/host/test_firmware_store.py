"""The firmware's store on the unix port: a persistent session, its queued
QoS 1 messages and a retained message survive kill -9 of the MicroPython
broker, with the store encrypted (firmware/storage.py: AES-GCM over cryptolib,
key derived with HKDF) or plain."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.broker_proc import DISCONNECT, RawClient, parse_publish, publish_packet
from tests.host.upy_broker_proc import UpyBrokerProcess

SECRET = b"board-secret-payload"


def run_and_kill(workdir: Path) -> None:
    with UpyBrokerProcess(workdir) as b:
        sub = RawClient(b.port)
        assert sub.connect("sensor-hub", clean=False) == b"\x00\x00"
        assert sub.subscribe("cmd/#", 1) == 1
        sub.send(DISCONNECT)
        pub = RawClient(b.port)
        pub.connect("pub")
        for i in range(3):
            pub.send(publish_packet(f"cmd/{i}", SECRET + b"%d" % i, qos=1, packet_id=i + 1))
            assert pub.read_packet()[0] == 0x40  # PUBACK: durable from here on
        pub.send(publish_packet("state/x", SECRET, qos=1, packet_id=9, retain=True))
        assert pub.read_packet()[0] == 0x40
        b.kill()  # SIGKILL


def check_after_restart(workdir: Path) -> str:
    with UpyBrokerProcess(workdir) as b:
        sub = RawClient(b.port)
        assert sub.connect("sensor-hub", clean=False) == b"\x01\x00"  # session present
        got = [parse_publish(*sub.read_packet())[:2] for _ in range(3)]
        assert got == [(f"cmd/{i}", SECRET + b"%d" % i) for i in range(3)]
        late = RawClient(b.port)
        late.connect("late")
        late.subscribe("state/#", 1)
        topic, payload, _q, retain, _d, _p = parse_publish(*late.read_packet())
        assert (topic, payload, retain) == ("state/x", SECRET, True)
        b.stop()
        return b.log_text()


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "aes-gcm"])
def test_state_survives_kill_9(tmp_path: Path, encrypted: bool) -> None:
    if encrypted:
        (tmp_path / "siskin.key").write_text("ab" * 32)
    run_and_kill(tmp_path)
    on_disk = (tmp_path / "siskin.store").read_bytes()
    assert (SECRET in on_disk) is not encrypted
    log = check_after_restart(tmp_path)
    assert "restored 1 sessions" in log
    assert ("NOT encrypted" in log) is not encrypted


def test_wrong_key_stops_the_start_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "siskin.key").write_text("ab" * 32)
    run_and_kill(tmp_path)
    (tmp_path / "siskin.key").write_text("cd" * 32)
    b = UpyBrokerProcess(tmp_path)
    with pytest.raises(RuntimeError):
        b.start(timeout=10)
    assert "wrong key" in b.log_text()
    b.kill()


@pytest.mark.parametrize("where", ["missing-dir/siskin.store", "a-directory"])
def test_store_that_cannot_be_opened_stops_at_the_repl(tmp_path: Path, where: str) -> None:
    # A missing directory, or a path the file system cannot open as a file
    # (as a full or read-only one would refuse it): the same after every
    # reset, so no "fatal at start-up ... restarting" (a reset loop on a
    # board) but the config stop with the reason (exit 2 on the unix port).
    (tmp_path / "a-directory").mkdir()
    b = UpyBrokerProcess(tmp_path, device={"storage": str(tmp_path / where)})
    with pytest.raises(RuntimeError):
        b.start(timeout=10)
    assert b.proc is not None and b.proc.wait(5) == 2
    log = b.log_text()
    assert "cannot be opened" in log and "storage_optional" in log
    assert "restarting" not in log


def test_storage_optional_serves_without_persistence(tmp_path: Path) -> None:
    store = tmp_path / "missing-dir" / "siskin.store"
    with UpyBrokerProcess(tmp_path, device={"storage": str(store)}, server={"storage_optional": True}) as b:
        assert "serving WITHOUT persistence" in b.log_text()
        c = RawClient(b.port)
        assert c.connect("sensor-hub", clean=False) == b"\x00\x00"
        c.send(DISCONNECT)
        b.stop()
    # Restarted: nothing was kept (and nothing written).
    with UpyBrokerProcess(tmp_path, device={"storage": str(store)}, server={"storage_optional": True}) as b:
        c = RawClient(b.port)
        assert c.connect("sensor-hub", clean=False) == b"\x00\x00"  # no session present
        b.stop()
    assert not store.parent.exists()
