"""The real images serving real clients over PPP in the emulated RP2040 (`make test-emu`).

The board's UART0 is a PPP link (tools/emu/uart.js) to a userspace peer on
the host (tools/emu/ppp.py: a Hayes modem, LCP, IPCP) whose IP packets go to
a TUN device in a network namespace the test makes (tests/emu/served.py);
mosquitto_pub/sub, paho and a Mosquitto broker run in that namespace and
reach the board at 10.0.0.2 through the firmware's own network path: the
dial-up script and network.PPP (firmware/uplink.py), lwIP, the image's
socket module, firmware/slot.py and firmware/poller.py.

Every wait is for a state (a console line, a peer event, a client's
callback); the wall clock only guards against a hang. Keep-alives are judged
by the chip on emulated time, which runs about ten times slower than the
host's: the clients' own timers (paho's keep-alive) are far from firing.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import Paho
from tools.bench import mqtt as raw
from tools.bench.sn_rtt import sn, sn_client, sn_expect
from tools.emu.served import BOARD_IP, GUARD_S, PEER_IP, TLS_LIMITS, TLS_PORT, TLS_SERVER, ServedBoard, board_tls
from tools.emu.sn_heap import SN_CONFIG, SN_PORT, SN_UP, publish_qos1, register

pytestmark = [pytest.mark.emu, pytest.mark.timeout(3600)]

PICOW_UF2 = Path(os.environ.get("EMU_PICOW_UF2", REPO_ROOT / "dist" / "rp2040_picow" / "siskin-0.1.0.uf2"))
PICO_UF2 = Path(os.environ.get("EMU_PICO_UF2", REPO_ROOT / "dist" / "rp2040_pico" / "siskin-0.1.0.uf2"))
BOOTROM = Path(os.environ.get("PICO_BOOTROM", "")) if os.environ.get("PICO_BOOTROM") else None
DIAL = [["AT", "OK", 2], ["ATE0", "OK", 2], ['AT+CGDCONT=1,"IP","internet"', "OK", 5], ["ATD*99#", "CONNECT", 10]]
UP = r"uplink ppp: up, address 10\.0\.0\.2 \(dial (\d+)\)"
HEAP = r"heap t=\d+ free=(\d+) alloc=(\d+) open=(\d+)"


def config(**extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "host": "0.0.0.0",
        "allow_anonymous": True,
        "server": {"heap_report": 1},
        "ppp": {"dial": DIAL, "backoff_min": 0.5, "backoff_max": 2},
    }
    cfg.update(extra)
    return cfg


def served(
    tmp_path: Path, uf2: Path, layout: str, cfg: dict[str, Any] | None = None, files: dict[str, bytes] | None = None
) -> ServedBoard:
    require("PICO_BOOTROM (a bootrom.bin built from raspberrypi/pico-bootrom)", BOOTROM and BOOTROM.is_file())
    require(f"the image {uf2} (make firmware)", uf2.is_file())
    require("root for ip netns and /dev/net/tun", os.geteuid() == 0 and Path("/dev/net/tun").exists())
    assert BOOTROM is not None
    return ServedBoard(tmp_path, uf2, BOOTROM, layout, cfg or config(), files)


def paho(client_id: str, v5: bool = False, clean: bool = True, keep_alive: int = 60) -> Paho:
    """A paho client of the board (tests/host/broker_proc.py), not yet connected."""
    return Paho(1883, client_id, clean=clean, keep_alive=keep_alive, protocol=5 if v5 else 4, host=BOARD_IP)


def granted(reasons: Any) -> list[int]:
    return [int(getattr(rc, "value", rc)) for rc in reasons]


@pytest.mark.parametrize(("uf2", "layout"), [(PICOW_UF2, "rp2040_picow"), (PICO_UF2, "rp2040_pico")])
def test_the_image_dials_and_serves_mosquitto_and_paho_over_ppp(tmp_path: Path, uf2: Path, layout: str) -> None:
    with served(tmp_path, uf2, layout) as s:
        s.wait_console(UP)
        for line in ("modem: AT -> OK", "modem: ATE0 -> OK", "modem: ATD*99# -> CONNECT", "IPCP opened 10.0.0.2"):
            s.wait_peer(line)
        print(f"{layout}: dialled, PPP up at t={s.emulated_ms()} ms (emulated)")
        # mosquitto_sub / mosquitto_pub: QoS 0, 1, 2 (3.1.1 and 5.0) and a retained message.
        sub = s.popen_ns("mosquitto_sub", "-h", BOARD_IP, "-t", "m/#", "-q", "2", "-v", "-C", "3", "-i", "msub")
        s.wait_console(r"open=1 ")
        for qos, v in ((0, "mqttv311"), (1, "mqttv311"), (2, "mqttv5")):
            r = s.ns("mosquitto_pub", "-h", BOARD_IP, "-t", f"m/q{qos}", "-m", f"qos{qos}", "-q", str(qos), "-V", v)
            assert r.returncode == 0, r.stderr
        out, _ = sub.communicate(timeout=GUARD_S)
        assert out.splitlines() == ["m/q0 qos0", "m/q1 qos1", "m/q2 qos2"], out
        r = s.ns("mosquitto_pub", "-h", BOARD_IP, "-t", "r/state", "-m", "on", "-q", "1", "-r")
        assert r.returncode == 0, r.stderr
        r = s.ns("mosquitto_sub", "-h", BOARD_IP, "-t", "r/#", "-C", "1", "-v", "-V", "mqttv5")
        assert r.stdout == "r/state on\n", r  # the retained message, to a new subscriber [MQTT-3.3.1-6]
        print(f"{layout}: mosquitto_pub/sub QoS 0/1/2 and retained: ok")

        def paho_round_trips() -> list[tuple[str, int, bytes, int, bool]]:
            got = []
            for v5 in (False, True):
                sub = paho("psub5" if v5 else "psub4", v5=v5).connect(GUARD_S)
                pub = paho("ppub5" if v5 else "ppub4", v5=v5).connect(GUARD_S)
                assert granted(sub.subscribe("p/#", 2, GUARD_S)) == [2]
                for qos in (0, 1, 2):
                    pub.publish(f"p/{qos}", b"x" * (10 + qos), qos, timeout=GUARD_S)
                    m = sub.get(GUARD_S)
                    got.append((m.topic, m.qos, m.payload, 5 if v5 else 4, m.retain))
                m_ret = paho("pret5" if v5 else "pret4", v5=v5).connect(GUARD_S)
                assert granted(m_ret.subscribe("r/#", 1, GUARD_S)) == [1]
                m = m_ret.get(GUARD_S)
                got.append((m.topic, m.qos, m.payload, 5 if v5 else 4, m.retain))
                for c in (sub, pub, m_ret):
                    c.close()
            return got

        got = s.in_ns(paho_round_trips)
        for level in (4, 5):
            mine = [g for g in got if g[3] == level]
            assert mine == [
                ("p/0", 0, b"x" * 10, level, False),
                ("p/1", 1, b"x" * 11, level, False),
                ("p/2", 2, b"x" * 12, level, False),
                ("r/state", 1, b"on", level, True),  # [MQTT-3.3.1-8] the retain flag on a retained replay
            ], mine
        print(f"{layout}: paho 3.1.1 and 5.0: CONNECT, SUBSCRIBE, QoS 0/1/2 round trips, retained: ok")
        assert "Traceback" not in s.console()


@pytest.mark.parametrize(("uf2", "layout"), [(PICOW_UF2, "rp2040_picow"), (PICO_UF2, "rp2040_pico")])
def test_a_qos0_burst_over_ppp_reaches_its_subscriber_whole_and_the_chip_stays_up(
    tmp_path: Path, uf2: Path, layout: str
) -> None:
    # 100 QoS 0 PUBLISHes sent at once (7,500 B, within max_out_buffer): the
    # chip sends full segments to the subscriber while the publisher's and
    # the ACKs arrive. Before boards/rp2/lwip_lock/ the UART write inside
    # lwIP's output ran network.PPP's input from the scheduler: lwIP's
    # segment lists were corrupted, the chip looped in its TCP timer and
    # the watchdog reset it (s.recv_exact fails at once on a reset).
    n = 100
    with served(tmp_path, uf2, layout) as s:
        s.wait_console(UP)

        def burst() -> tuple[bytes, bytes, int]:
            sub = raw.open_client(1883, "bsub", host=BOARD_IP, timeout=GUARD_S)
            raw.do_subscribe(sub, "burst/t", 0)
            pub = raw.open_client(1883, "bpub", host=BOARD_IP, timeout=GUARD_S)
            frames = b"".join(raw.publish("burst/t", b"%03d" % i + b"x" * 61, 0) for i in range(n))
            start = s.emulated_ms()
            pub.sendall(frames)
            got = s.recv_exact(sub, len(frames))
            took = s.emulated_ms() - start
            pub.close()
            sub.close()
            return frames, got, took

        sent, got, took = s.in_ns(burst)
        assert got == sent  # every one, in order [MQTT-4.6.0-6]
        print(f"{layout}: QoS 0 burst of {n} over PPP delivered whole in {took} emulated ms, no reset")
        assert s.board is not None and s.board.resets == 0
        assert "Traceback" not in s.console()


def test_tls_clients_on_the_pico_w_over_ppp_fill_its_heap_as_the_start_up_said(tmp_path: Path) -> None:
    # mbedTLS allocates from the MicroPython heap on the rp2 port: ~24 KB a
    # TLS client. With TLS_LIMITS (3 clients, the refusal slot) the start-up
    # says all fit; every client then does its handshake, a QoS 1 message
    # goes from one to another, and the one too many gets its refusal over
    # TLS, the chip still up.
    tls, files, ctx = board_tls(tmp_path)
    cfg = config(**tls)
    cfg["server"] = {**cfg["server"], **TLS_SERVER}
    n = TLS_LIMITS["max_connections"]
    with served(tmp_path, PICOW_UF2, "rp2040_picow", cfg, files) as s:
        s.wait_console(rf"TLS: about 25 KB per client of the MicroPython heap: room for {n} TLS")
        s.wait_console(UP)
        idle = int(s.wait_console(HEAP, len(s.console())).group(1))

        def clients() -> tuple[list[Any], bytes, bytes]:
            def connect(client_id: str) -> Any:
                sock = socket.create_connection((BOARD_IP, TLS_PORT), timeout=GUARD_S)
                tls_sock = ctx.wrap_socket(sock, server_hostname=BOARD_IP)
                tls_sock.sendall(raw.connect(client_id))
                return tls_sock

            socks = [connect(f"tls{i}") for i in range(n)]
            for sock in socks:
                assert raw.recv_exact(sock, 4) == b"\x20\x02\x00\x00"
            raw.do_subscribe(socks[0], "t/#", 1)
            socks[1].sendall(raw.publish("t/x", b"over TLS", 1, 7))
            assert raw.recv_exact(socks[1], 4) == b"\x40\x02\x00\x07"  # PUBACK
            delivered = raw.recv_exact(socks[0], 2 + 2 + 3 + 2 + 8)
            extra = connect("one-too-many")
            refusal = raw.recv_exact(extra, 4)
            extra.close()
            return socks, delivered, refusal

        socks, delivered, refusal = s.in_ns(clients)
        assert (delivered[0], delivered[4:7], delivered[9:]) == (0x32, b"t/x", b"over TLS"), delivered
        assert refusal == b"\x20\x02\x00\x03"  # 3.1.1: server unavailable (over max_connections)
        full = s.wait_console(HEAP.replace(r"open=(\d+)", f"open={n}"), len(s.console()))
        free_full = int(full.group(1))
        print(
            f"TLS on the Pico W over PPP: {idle} B free idle, {free_full} B with {n} TLS clients"
            f" ({(idle - free_full) // n} B per TLS client); the one too many refused over TLS"
        )
        for sock in socks:
            sock.close()
        assert s.board is not None and s.board.resets == 0
        assert "Traceback" not in s.console()


def test_a_will_goes_out_when_the_link_is_cut_and_the_link_is_redialled(tmp_path: Path) -> None:
    with served(tmp_path, PICOW_UF2, "rp2040_picow") as s:
        s.wait_console(UP)

        def set_up() -> Paho:
            watcher = paho("watcher", clean=False).connect(GUARD_S)
            assert granted(watcher.subscribe("will/#", 1, GUARD_S)) == [1]
            watcher.close()  # a persistent session: the will waits for it
            dying = paho("dying", keep_alive=2)
            dying.client.will_set("will/dying", b"gone", qos=1)
            return dying.connect(GUARD_S)  # kept open: its socket dies with the link

        dying = s.in_ns(set_up)
        mark = len(s.console())
        s.hang_up()
        s.wait_peer("link down: hung up by the peer")
        s.wait_console(r"uplink ppp: link lost: ", mark)
        up = s.wait_console(UP, mark)
        assert int(up.group(1)) == 2, up.group(0)
        print(f"link cut and redialled: {up.group(0)} at t={s.emulated_ms()} ms")
        # The dying client sent nothing since: its keep-alive (2 s, 1.5 times
        # that by the spec) runs out on the chip, which publishes its will
        # [MQTT-3.1.2-8] to the watcher's session.

        def collect() -> Any:
            dying.client.loop_stop()  # (silent from the cut on: it never reconnects)
            watcher = paho("watcher", clean=False).connect(GUARD_S)
            assert watcher.session_present
            m = watcher.get(GUARD_S)
            watcher.close()
            return m.topic, m.payload, m.qos

        assert s.in_ns(collect) == ("will/dying", b"gone", 1)
        print("will delivered to the persistent watcher after the redial")


def test_a_persistent_session_keeps_its_queued_messages_across_a_power_cut(tmp_path: Path) -> None:
    n = 20
    with served(tmp_path, PICOW_UF2, "rp2040_picow") as s:
        s.wait_console(UP)

        def fill() -> int:
            sub = paho("keeper", clean=False).connect(GUARD_S)
            assert granted(sub.subscribe("q/#", 1, GUARD_S)) == [1]
            sub.close()
            pub = paho("filler").connect(GUARD_S)
            acked = 0
            for i in range(n):
                pub.publish(f"q/{i}", b"m%03d" % i, 1, timeout=GUARD_S)  # returns once PUBACK came: acknowledged
                acked += 1
            pub.close()
            return acked

        acked = s.in_ns(fill)
        # The power goes now (after the last PUBACK left the chip), then comes back.
        s.power_cut()
        restored = s.wait_console(r"restored (\d+) sessions, (\d+) subscriptions, (\d+) queued messages")
        print("after the power cut:", restored.group(0))
        s.wait_console(UP)

        def drain() -> list[bytes]:
            sub = paho("keeper", clean=False).connect(GUARD_S)
            assert sub.session_present
            got = [sub.get(GUARD_S).payload for _ in range(acked)]
            sub.close()
            return got

        got = s.in_ns(drain)
        lost = acked - len(set(got))
        print(f"power cut: acknowledged {acked}, delivered {len(got)}, lost {lost}")
        assert got == [b"m%03d" % i for i in range(n)]  # in order [MQTT-4.6.0-6]
        assert int(restored.group(3)) == n


def test_the_bridge_over_ppp_drains_its_backlog_after_the_link_is_redialled(tmp_path: Path) -> None:
    require("mosquitto", subprocess.run(["which", "mosquitto"], capture_output=True).returncode == 0)
    bridge = [{"name": "up", "addresses": [f"{PEER_IP}:1883"], "topic": [{"pattern": "b/#", "direction": "out", "qos": 1}]}]
    # Fewer than the bridge's local session may hold while its upstream is
    # away (max_queued_bytes 8,192, about 512 B charged per queued copy: the
    # 14th was refused): a refusal is another test's matter.
    n = 10
    with served(tmp_path, PICOW_UF2, "rp2040_picow", config(bridge=bridge)) as s:
        conf = tmp_path / "mosquitto.conf"
        conf.write_text(f"listener 1883 {PEER_IP}\nallow_anonymous true\npersistence false\nlog_dest none\n")
        upstream = s.popen_ns("mosquitto", "-c", str(conf))
        try:
            s.wait_console(UP)
            s.wait_console(r"bridge up: connected to 10\.0\.0\.1:1883")
            # The sink subscribes before anything is published (mosquitto_sub's
            # SUBACK is not observable; a retained "ready" proves it is in).
            s.ns("mosquitto_pub", "-h", PEER_IP, "-t", "b/ready", "-m", "ready", "-r", "-q", "1")
            sink = s.popen_ns("mosquitto_sub", "-h", PEER_IP, "-t", "b/#", "-q", "1", "-i", "sink")
            assert sink.stdout is not None
            assert sink.stdout.readline() == "ready\n"

            def publish(first: int, last: int) -> int:
                pub = paho(f"bpub{first}").connect(GUARD_S)
                for i in range(first, last):
                    pub.publish(f"b/{i}", str(i).encode(), 1, timeout=GUARD_S)
                pub.close()
                return last - first

            acked = s.in_ns(lambda: publish(0, n // 2))
            mark = len(s.console())
            s.hang_up()
            s.wait_console(r"bridge up: connection to 10\.0\.0\.1:1883 lost", mark)
            s.wait_console(UP, mark)
            acked += s.in_ns(lambda: publish(n // 2, n))
            # Until every acknowledged message is upstream; a QoS 1 message in
            # flight at the cut may come twice (at least once [MQTT-4.3.2-1]).
            got: list[int] = []
            while set(got) != set(range(n)):
                line = sink.stdout.readline()
                assert line, got
                got.append(int(line))
            sink.terminate()
            lost = acked - len(set(got))
            print(
                f"bridge over PPP, link cut mid-stream: acknowledged {acked}, delivered upstream {len(set(got))}"
                f" (+{len(got) - len(set(got))} duplicate), lost {lost}"
            )
            assert sorted(set(got)) == list(range(n))
        finally:
            upstream.terminate()
            upstream.wait()


def test_a_client_flood_at_the_limits_is_refused_cleanly_and_the_heap_is_measured(tmp_path: Path) -> None:
    import json

    limits = json.loads((REPO_ROOT / "boards" / "rp2040_picow.json").read_text())["limits"]
    with served(tmp_path, PICOW_UF2, "rp2040_picow") as s:
        s.wait_console(UP)
        up = s.wait_console(UP)
        base_free = int(s.wait_console(HEAP, up.end()).group(1))  # after a collection, no client

        def flood() -> tuple[list[Paho], Any]:
            clients = [paho(f"flood{i}").connect(GUARD_S) for i in range(limits["max_connections"])]
            extra = paho("one-too-many", v5=True)
            extra.client.connect(BOARD_IP, 1883)
            extra.client.loop_start()
            assert extra.connected.wait(GUARD_S)
            extra.client.loop_stop()
            return clients, extra.connack_rc

        clients, rc = s.in_ns(flood)
        assert rc.value == 0x89, rc  # Server busy: over max_connections
        mark = len(s.console())
        full = s.wait_console(HEAP.replace(r"open=(\d+)", f"open={limits['max_connections']}"), mark)
        free_full = int(full.group(1))
        per_client = (base_free - free_full) // limits["max_connections"]
        print(
            f"heap on the real image: {base_free} B free idle, {free_full} B with {limits['max_connections']} clients"
            f" ({per_client} B per client); the one too many refused: {rc}"
        )
        assert free_full > 0.3 * (free_full + int(full.group(2)))

        def after() -> None:  # the board still serves
            for c in clients:
                c.close()
            paho("after-the-flood").connect(GUARD_S).close()

        s.in_ns(after)
        assert "Traceback" not in s.console()


@pytest.mark.parametrize(("uf2", "layout"), [(PICOW_UF2, "rp2040_picow"), (PICO_UF2, "rp2040_pico")])
def test_an_mqtt_sn_client_over_ppp_meets_a_paho_client_on_the_board(tmp_path: Path, uf2: Path, layout: str) -> None:
    # MQTT-SN v1.2 over the image's own network path: hand-made datagrams
    # from the namespace to the chip's address over UDP, across the PPP link,
    # to firmware/sn.py's socket and the frozen gateway. The SN client
    # CONNECTs, REGISTERs, PUBLISHes QoS 1 and gets its PUBACK; a paho
    # subscriber on the same board has the message. Then the other way: the
    # SN client SUBSCRIBEs by name (the SUBACK gives the topic id), paho
    # publishes QoS 1 and the gateway's delivery (its wake, pumped by the
    # firmware's task) reaches the SN client, which acknowledges it.
    with served(tmp_path, uf2, layout, config(mqttsn=SN_CONFIG)) as s:
        s.wait_console(SN_UP)
        s.wait_console(UP)
        start = s.emulated_ms()

        def sn_to_paho() -> tuple[Any, Any]:
            watcher = paho("sn-watcher").connect(GUARD_S)
            assert granted(watcher.subscribe("sn/#", 1, GUARD_S)) == [1]
            device = sn_client(SN_PORT, "sn-device", host=BOARD_IP, timeout=GUARD_S, duration=3600)
            topic_id = register(device, "sn/temp", 1)
            publish_qos1(device, topic_id, 2, b"21.5")  # (its PUBACK: accepted, our topic id and msg id)
            return watcher.get(GUARD_S), device

        m, device = s.in_ns(sn_to_paho)
        assert (m.topic, m.payload, m.qos, m.retain) == ("sn/temp", b"21.5", 1, False)
        print(f"{layout}: SN PUBLISH QoS 1 -> PUBACK, paho has it: {s.emulated_ms() - start} emulated ms from CONNECT")

        def paho_to_sn() -> bytes:
            sn(device, 0x12, b"\x20\x00\x03sn/cmd")  # SUBSCRIBE QoS 1, a normal name, msg id 3
            ack = sn_expect(device, 0x13)  # SUBACK: flags, topic id, msg id, return code
            assert (ack[0] & 0x60, ack[3:6]) == (0x20, b"\x00\x03\x00"), ack.hex()  # QoS 1 granted, accepted
            topic_id = ack[1:3]
            sender = paho("sn-sender").connect(GUARD_S)
            sender.publish("sn/cmd", b"on", 1, timeout=GUARD_S)
            got = sn_expect(device, 0x0C)  # PUBLISH: flags, topic id, msg id, data
            assert got[1:3] == topic_id, got.hex()
            sn(device, 0x0D, got[1:5] + b"\x00")  # PUBACK
            return got

        got = s.in_ns(paho_to_sn)
        assert (got[0] & 0x60, got[5:]) == (0x20, b"on")  # QoS 1, the payload
        print(f"{layout}: and paho PUBLISH QoS 1 -> the SN subscriber: ok at t={s.emulated_ms()} ms (emulated)")
        device.close()
        assert s.board is not None and s.board.resets == 0
        assert "Traceback" not in s.console()
