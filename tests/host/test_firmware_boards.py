"""The firmware at the boards' real heaps, frozen as in the images (`make test-boards`).

MICROPY_UNIX32 names a 32-bit unix MicroPython with Siskin frozen in (`make
firmware BOARD=unix32 MICROPY_DIR=...`): the boards' word size and the
image's frozen set, so the heaps are the boards' own (tools/board_heap.py),
not twice them as for the venv's 64-bit `micropython`. These tests are
marked `boards` and left out of `make test` (CI has no MicroPython checkout
to build the binary from); `make test-boards` runs them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import Paho
from tests.host.upy_broker_proc import UpyBrokerProcess
from tools.board_heap import BOARD_HEAPS, heap_bytes

pytestmark = pytest.mark.boards


def unix32() -> str:
    exe = os.environ.get("MICROPY_UNIX32", "")
    require("a 32-bit MicroPython with Siskin frozen", exe and os.access(exe, os.X_OK), "make firmware BOARD=unix32")
    return exe


@pytest.mark.parametrize("board", sorted(BOARD_HEAPS))
def test_every_client_slot_served_at_the_board_heap(board: str, tmp_path: Path) -> None:
    heap = BOARD_HEAPS[board]
    settings = REPO_ROOT / "boards" / f"{board}.json"  # a path: the frozen run's directory has no boards/
    max_connections = json.loads(settings.read_text())["limits"]["max_connections"]
    with UpyBrokerProcess(tmp_path, board=str(settings), heap=heap, heap_report=1, frozen_exe=unix32()) as broker:
        start = broker.wait_heap_samples(1)[0]
        print(f"{board}: {start['free']} B free of {heap_bytes(heap)} after start")
        # The aim of docs/boards.md: 30 % of the heap free when every pool is
        # full; after start, before any client, at least that much is left.
        assert start["free"] >= 0.3 * heap_bytes(heap), start
        clients = []
        try:
            for i in range(max_connections):
                c = Paho(broker.port, f"c{i}").connect()
                clients.append(c)
                c.subscribe(f"t/{i}", 1)
            for i, c in enumerate(clients):
                c.publish(f"t/{(i + 1) % len(clients)}", b"at the board heap", 1)
            for c in clients:
                assert c.get().payload == b"at the board heap"
            samples = broker.wait_heap_samples(len(broker.heap_samples()) + 2)
            print(f"{board}: {samples[-1]['free']} B free with {len(clients)} clients")
        finally:
            for c in clients:
                c.close()
        assert broker.stop() == 0, broker.log_text()


RESTORED = r"restored (\d+) sessions, (\d+) subscriptions, (\d+) queued messages, (\d+) retained"


@pytest.mark.parametrize("board", sorted(BOARD_HEAPS))
def test_a_restart_over_a_store_at_the_limits_serves_at_the_board_heap(board: str, tmp_path: Path) -> None:
    """Issue 28, as `make test-emu` saw it on the real Pico W image: the store
    filled to the board file's limits (tests/upy/store_at_limits.py,
    the emulated board's self-test), then the frozen firmware restarted over
    it at the image's heap. Before: the restore, reading one record at a
    time with no collection until the heap was full, left what it restored
    spread over all of it, and the slots' 1,024 B read buffers found no block:
    "out of memory at start-up (... allocating 1024 bytes; 172576 B of the
    205184 B heap free now)". Now the collections run every gc_threshold
    bytes from the restore on (firmware/startup.py)."""
    heap = BOARD_HEAPS[board]
    settings = REPO_ROOT / "boards" / f"{board}.json"
    store = tmp_path / "siskin.store"
    upy = REPO_ROOT / "tests" / "upy"
    fill = subprocess.run(
        [unix32(), "-X", f"heapsize={heap}", str(upy / "store_at_limits.py"), str(settings), str(store)],
        env=dict(os.environ, MICROPYPATH=f".frozen:{REPO_ROOT / 'tests' / 'core'}:{upy}"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fill.stdout.endswith("FILLED\n"), fill.stdout + fill.stderr
    limits = json.loads(settings.read_text())["limits"]
    with UpyBrokerProcess(tmp_path, board=str(settings), heap=heap, heap_report=1, frozen_exe=unix32()) as broker:
        start = broker.wait_heap_samples(1)[0]
        restored = re.search(RESTORED, broker.log_text())
        assert restored is not None, broker.log_text()
        # The keeper's session and its queued QoS 1 message, the fill's
        # sessions, every subscription and retained message the limits let in.
        per_client = min(
            limits["max_subscriptions"] // limits["max_connections"], limits["max_subscriptions_per_client"]
        )
        subscriptions = min(limits["max_subscriptions"], 1 + limits["max_connections"] * per_client)
        expected = [1 + limits["max_connections"], subscriptions, 1, limits["max_retained"]]
        assert [int(n) for n in restored.groups()] == expected, broker.log_text()
        print(f"{board}: restarted over a store at its limits, {start['free']} B free of {heap_bytes(heap)}")
        assert start["free"] >= 0.3 * heap_bytes(heap), start
        keeper = Paho(broker.port, "keeper", clean=False).connect()
        try:
            assert keeper.session_present
            msg = keeper.get()
            assert (msg.topic, msg.payload, msg.qos) == ("keep/queued", b"q", 1)
        finally:
            keeper.close()
        assert broker.stop() == 0, broker.log_text()


@pytest.mark.parametrize("board", sorted(BOARD_HEAPS))
def test_mqtt_sn_served_at_the_board_heap(board: str, tmp_path: Path) -> None:
    """MQTT-SN on the frozen firmware at the board's heap (issue 40): the
    device config's "mqttsn" object, two SN clients in two of the board's
    max_connections and TCP clients in the rest. Each SN client REGISTERs
    and PUBLISHes QoS 1 to a TCP subscriber (§6.5, §6.6), one SUBSCRIBEs to
    a wildcard and gets a TCP client's QoS 1 PUBLISH after the gateway's
    REGISTER (§6.9, §6.10); then, every connection in use, 30 % of the heap
    is still free (docs/mqtt-sn.md, docs/boards.md)."""
    from tests.host.test_firmware_mqttsn import free_udp_port
    from tests.host.test_mqttsn_udp import PUBACK, PUBLISH, QOS, REGACK, REGISTER, SnRaw, publish_fields, u16

    heap = BOARD_HEAPS[board]
    settings = REPO_ROOT / "boards" / f"{board}.json"
    max_connections = json.loads(settings.read_text())["limits"]["max_connections"]
    sn_port = free_udp_port()
    device = {"mqttsn": {"port": sn_port}, "allow_anonymous": True}
    with UpyBrokerProcess(
        tmp_path, board=str(settings), heap=heap, heap_report=1, frozen_exe=unix32(), device=device
    ) as broker:
        broker.wait_log(rf"MQTT-SN \(UDP\) on 127\.0\.0\.1:{sn_port}")
        tcp: list[Paho] = []
        sn: list[SnRaw] = []
        try:
            for i in range(max_connections - 2):
                tcp.append(Paho(broker.port, f"tcp{i}").connect())
            tcp[0].subscribe("sn/#", 1)
            for i in range(2):
                r = SnRaw(sn_port)
                sn.append(r)
                assert r.connect(f"sn{i}", duration=0) == 0
                r.send(REGISTER, u16(0) + u16(1) + b"sn/%d" % i)
                body = r.expect(REGACK)
                topic_id = int.from_bytes(body[0:2], "big")
                assert body[2:5] == u16(1) + b"\x00", body
                r.publish(topic_id, b"from sn%d" % i, 1, msg_id=2)
                assert r.expect(PUBACK) == u16(topic_id) + u16(2) + b"\x00"
                msg = tcp[0].get()
                assert (msg.topic, msg.payload, msg.qos) == (f"sn/{i}", b"from sn%d" % i, 1)
            assert sn[1].subscribe("tcp/+", 1, 3) == (0, 0)
            tcp[-1].publish("tcp/x", b"to sn1", 1)
            reg = sn[1].expect(REGISTER)
            sn[1].send(REGACK, reg[0:2] + reg[2:4] + b"\x00")
            flags, tid, mid, data = publish_fields(sn[1].expect(PUBLISH))
            assert (flags & 0x60, tid, data) == (QOS[1], int.from_bytes(reg[0:2], "big"), b"to sn1")
            sn[1].send(PUBACK, u16(tid) + u16(mid) + b"\x00")
            samples = broker.wait_heap_samples(len(broker.heap_samples()) + 2)
            free = samples[-1]["free"]
            print(f"{board}: {free} B free of {heap_bytes(heap)} with {len(tcp)} TCP and {len(sn)} SN clients")
            assert free >= 0.3 * heap_bytes(heap), samples[-1]
        finally:
            for c in tcp:
                c.close()
            for r in sn:
                r.close()
        assert broker.stop() == 0, broker.log_text()


def test_board_heap_tool_prints_the_table() -> None:
    """tools/board_heap, which docs/boards.md quotes, measures with the same binary."""
    proc = subprocess.run(
        [sys.executable, "-m", "tools.board_heap", "--micropython", unix32(), "--board", "rp2040_picow=209260"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = re.search(
        r"^\| `boards/rp2040_picow.json` \| 209,260 B \| \*\*([\d,]+) B\*\* \| ([\d,]+) B \|$", proc.stdout, re.M
    )
    assert row, proc.stdout
    free, used = (int(g.replace(",", "")) for g in row.groups())
    assert 0 < free < 209260 and 0 < used < 209260 and free + used <= 209260


def test_board_limits_leave_30_percent_and_room_for_the_largest_packet(tmp_path: Path) -> None:
    """tools/ram_serve (which writes docs/boards.md's table) on the frozen
    image at each board's heap: after 200 clients came and went (what their
    churn leaves: grown tables, the warm topic cache, fragmentation), filled
    to the board file's limits, at least
    30 % of the heap is free, a PUBLISH of max_packet_size still goes
    through (a heap fragmented into small holes would refuse its block), and
    an idle client stays within its budget."""
    boards = sorted(BOARD_HEAPS)
    cmd = [sys.executable, "-m", "tools.ram_serve", "--micropython", unix32(), "--frozen", "--churn", "200"]
    for board in boards:
        cmd += ["--heap", BOARD_HEAPS[board]]
    cmd += [str(REPO_ROOT / "boards" / f"{board}.json") for board in boards]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["board"] for r in results] == [f"{board}.json" for board in boards]
    for board, r in zip(boards, results, strict=True):
        limits = json.loads((REPO_ROOT / "boards" / f"{board}.json").read_text())["limits"]
        assert 0.95 * heap_bytes(BOARD_HEAPS[board]) <= r["heap"] <= heap_bytes(BOARD_HEAPS[board]), r
        # (On a real image: less what the Pico W image held beyond this port.)
        assert r["free_real"] >= 0.3 * r["heap"], r
        assert r["clients"] == limits["max_connections"], r
        assert r["largest_publish"] == limits["max_packet_size"], r
        assert r["churn"] == 200, r
        # An idle client, its socket and poller entry included, costs at most
        # 800 B on the 32-bit firmware (docs/boards.md; 970 B with a task each).
        assert 0 < r["per_client"] <= 800, r
