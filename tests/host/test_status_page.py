"""The status page in a real headless Chromium, on a gateway as an operator has it.

One Siskin with a login on its HTTP listener (an administrator, `admin`,
and a user, `bob`), a TLS listener whose certificate expires in 20 days,
and two bridges: `cloud` to a real Mosquitto (up, then stopped with
SIGSTOP and resumed) and `backup` to a port where nothing listens (down).
Devices publish with paho; the test then reads the page as each user
sees it and checks every figure against what it caused: messages in and
out per client, an offline session's queue and last-seen time, the drops
(QoS 0 to an offline session, a message over a client's Maximum Packet
Size) with their limits, the retained count without $SYS, the
certificate's expiry, the bridges' states and queues, the charts' hover
values against the API's samples. The administrator kicks a client,
drops a session and clears retained messages from the page; the user
sees no button and gets 403 anyway.

The page redraws every 2 s: every read here is one JavaScript call that
returns the table as text (no element reference is held across a
redraw), and every check waits for the state it wants, never a time.
The screenshot (docs/status-page.png) is written when
SISKIN_WRITE_SCREENSHOT=1 (`make screenshot`).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import trustme
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from common.broker.sys_topics import SYS_FIGURES
from tests.conftest import REPO_ROOT, require
from tests.host.broker_proc import BrokerProcess, wait_until
from tests.host.browser import require_chromium, start_chromium
from tests.host.test_web import call
from tools.bench.brokers import Mosquitto

pytestmark = [pytest.mark.interop, pytest.mark.slow]

ADMIN = ("admin", "s3cret")
USER = ("bob", "b0b")
CERT_DAYS = 20  # the TLS listener's certificate expires in this many days and 12 hours
NONE = "\u2013"  # what the page shows for a figure it has not (an en dash)


class Device:
    """A paho MQTT v5 client: its messages and the reason codes it was disconnected with, in queues."""

    def __init__(
        self, port: int, client_id: str, user: tuple[str, str] | None = None, expiry: int = 0, max_packet: int = 0
    ) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.disconnects: queue.Queue[int] = queue.Queue()
        connack: queue.Queue[int] = queue.Queue()
        props = Properties(PacketTypes.CONNECT)
        if expiry:
            props.SessionExpiryInterval = expiry
        if max_packet:
            props.MaximumPacketSize = max_packet
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        if user is not None:
            c.username_pw_set(*user)
        c.reconnect_delay_set(600, 600)  # a kicked client stays away (paho would come back after 1 s)
        c.on_connect = lambda cl, u, flags, rc, p: connack.put(rc.value)
        c.on_message = lambda cl, u, msg: self.messages.put(msg)
        c.on_disconnect = lambda cl, u, flags, rc, p: self.disconnects.put(rc.value)
        c.connect("127.0.0.1", port, keepalive=60, properties=props if expiry or max_packet else None)
        c.loop_start()
        self.client = c
        assert connack.get(timeout=10) == 0

    def subscribe(self, flt: str, qos: int) -> None:
        done: queue.Queue[Any] = queue.Queue()
        self.client.on_subscribe = lambda cl, u, mid, rcs, p: done.put(rcs)
        self.client.subscribe(flt, qos)
        assert done.get(timeout=10)[0].value == qos

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos, retain).wait_for_publish(10)

    def receive(self, n: int) -> list[Any]:
        return [self.messages.get(timeout=20) for _ in range(n)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def passwd(path: Path, user: str, password: str, create: bool) -> None:
    subprocess.run(
        [sys.executable, "-m", "cpython_host", "passwd", "--stdin", "--iterations", "1000"]
        + (["-c"] if create else [])
        + [str(path), user],
        input=password + "\n",
        text=True,
        check=True,
        cwd=REPO_ROOT,
        timeout=20,
    )


class Meters:
    """Background traffic for the charts: an electricity meter publishing QoS 0
    readings at a rate that rises and falls, and a historian reading them (on
    topics no figure under test counts)."""

    def __init__(self, port: int) -> None:
        self.historian = Device(port, "historian")
        self.historian.subscribe("meters/#", 0)
        self.meter = Device(port, "meter")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(0.05):  # a load's pace, not a synchronisation
            burst = 1 + int(3 * (1 + math.sin((time.monotonic() - started) / 3)))
            for _ in range(burst):
                self.meter.client.publish("meters/main/power", b"1234.5", 0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.meter.close()
        self.historian.close()


class Gateway:
    """The broker, its upstream, the devices, and what the test made them do."""

    def __init__(self, broker: BrokerProcess, mosquitto: Mosquitto, not_after: int, devices: dict[str, Device]) -> None:
        self.broker = broker
        self.mosquitto = mosquitto
        self.not_after = not_after
        self.devices = devices
        self.url = broker.http_url()
        self.tls_port = broker.ports()[1]

    def api(self, path: str, auth: tuple[str, str] = ADMIN) -> Any:
        status, body = call(urllib.request.Request(self.url + path), auth)
        assert status == 200, body
        return json.loads(body)

    def page(self, user: tuple[str, str]) -> Any:
        """A Chromium showing the page, logged in as `user` (basic auth from the URL, as typed in the address bar)."""
        driver = start_chromium("--window-size=1360,1700", "--hide-scrollbars")
        driver.get(self.url.replace("://", f"://{user[0]}:{user[1]}@") + "/")
        wait_until(lambda: driver.execute_script("return document.body.dataset.polls"), 60, lambda: body(driver))
        return driver


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    require_chromium()
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    tmp = tmp_path_factory.mktemp("gateway")
    passwd(tmp / "passwd", *ADMIN, create=True)
    passwd(tmp / "passwd", *USER, create=False)
    ca = trustme.CA()
    not_after = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(
        days=CERT_DAYS, hours=12
    )
    cert = ca.issue_cert("127.0.0.1", common_name="gateway.lan", not_after=not_after)
    cert.cert_chain_pems[0].write_to_path(str(tmp / "server.crt"))
    cert.private_key_pem.write_to_path(str(tmp / "server.key"))
    # `backup`'s upstream: a port held bound and never listening, so every attempt is refused.
    nowhere = socket.socket()
    nowhere.bind(("127.0.0.1", 0))
    mosquitto = Mosquitto(tmp)
    mosquitto.start()
    timers = {"keepalive": 1, "connect_timeout": 1.0, "backoff_min": 0.2, "backoff_max": 1.0}
    bridges = [
        {
            "name": "cloud",
            "addresses": [f"127.0.0.1:{mosquitto.port}"],
            "client_id": "edge1",
            **timers,
            "topic": [{"pattern": "#", "direction": "out", "local_prefix": "up/", "remote_prefix": "edge1/", "qos": 1}],
        },
        {
            "name": "backup",
            "addresses": [f"127.0.0.1:{nowhere.getsockname()[1]}"],
            **timers,
            "topic": [{"pattern": "#", "direction": "out", "local_prefix": "alerts/", "remote_prefix": "a/", "qos": 1}],
        },
    ]
    broker = BrokerProcess(
        tmp / "siskin",
        limits={"sys_interval": 1},
        listeners=[
            {"host": "127.0.0.1", "port": 0},
            {"host": "127.0.0.1", "port": 0, "certfile": str(tmp / "server.crt"), "keyfile": str(tmp / "server.key")},
        ],
        http={"port": 0, "sample_interval": 1, "auth": "basic", "admins": ["admin"]},
        security={"password_file": str(tmp / "passwd"), "allow_anonymous": True},
        bridges=bridges,
    )
    devices: dict[str, Device] = {}
    meters = None
    try:
        broker.start()
        broker.wait_log("bridge cloud: connected to", 30)
        port = broker.port
        # A small gateway: a dashboard and a logger (persistent, gone
        # offline) of the administrator's, two sensors of bob's, a tiny
        # client that takes packets of 64 bytes at most.
        devices["dashboard"] = Device(port, "dashboard", ADMIN)
        devices["dashboard"].subscribe("sensors/#", 1)
        logger = Device(port, "logger", ADMIN, expiry=3600)
        logger.subscribe("sensors/+/temperature", 1)
        logger.close()
        devices["tiny"] = Device(port, "tiny", max_packet=64)
        devices["tiny"].subscribe("big/#", 0)
        devices["sensor-1"] = Device(port, "sensor-1", USER)
        devices["sensor-2"] = Device(port, "sensor-2", USER)
        devices["cloud"] = Device(mosquitto.port, "consumer")
        devices["cloud"].subscribe("edge1/#", 1)
        meters = Meters(port)
        g = Gateway(broker, mosquitto, int(not_after.timestamp()), devices)

        def ready() -> bool:
            sessions = {s["client_id"]: s for s in g.api("/api/sessions")["sessions"]}
            backup = sessions.get("siskin-bridge-backup")  # (subscribed once at start, then offline: it queues)
            return (
                not sessions["logger"]["connected"] and backup is not None and backup["subscriptions"] == ["alerts/#"]
            )

        wait_until(ready, 60, lambda: broker.log_text())
        yield g
    finally:
        if meters is not None:
            meters.close()
        for d in devices.values():
            d.close()
        if mosquitto.proc is not None and mosquitto.proc.poll() is None:
            os.kill(mosquitto.pid, signal.SIGCONT)
        mosquitto.stop()
        log = broker.log_text()
        broker.kill()
        nowhere.close()
    assert "Traceback" not in log, log


# ------------------------------------------------------------------ reading the page

TABLE = """return Array.from(document.querySelectorAll("#" + arguments[0] + " tbody tr"),
    (tr) => [tr.dataset.key, Array.from(tr.cells, (td) => td.textContent), tr.className, Array.from(tr.cells, (td) => td.className)]);"""


def table(driver: Any, table_id: str) -> dict[str, list[str]]:
    """A table's rows by key (client id, bridge name, counter): each row's cell texts, read in one call."""
    return {key: cells for key, cells, _, _ in driver.execute_script(TABLE, table_id)}


def cell_classes(driver: Any, table_id: str) -> dict[str, list[str]]:
    return {key: classes for key, _, _, classes in driver.execute_script(TABLE, table_id)}


def body(driver: Any) -> str:
    text: str = driver.execute_script("return document.body.innerText")
    return text


def shown(driver: Any, selector: str) -> bool:
    """Whether an element is displayed (rendered with a box)."""
    return bool(
        driver.execute_script(
            "const e = document.querySelector(arguments[0]); return !!e && e.getClientRects().length > 0;", selector
        )
    )


def wait_page(driver: Any, condition: Callable[[], Any], timeout: float = 60) -> Any:
    return wait_until(condition, timeout, lambda: body(driver))


def hhmmss(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def hover_tooltip(driver: Any, chart_id: str) -> list[str]:
    """Move the mouse over the right part of a chart; the tooltip's lines.

    The mouse is moved again on every look: the page's refreshes may move
    the chart (a new warning line above it) or redraw it under a still mouse."""
    from selenium.webdriver.common.action_chains import ActionChains

    def shown_tip() -> list[str] | None:
        svg = driver.find_element("css selector", f"#{chart_id} svg")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", svg)
        ActionChains(driver).move_to_element_with_offset(svg, int(svg.size["width"] * 0.4), 0).perform()
        tip: list[str] | None = driver.execute_script(
            "const t = document.querySelector('#' + arguments[0] + ' .tip'); return t.hidden ? null : Array.from(t.children, (c) => c.textContent);",
            chart_id,
        )
        return tip

    lines: list[str] = wait_page(driver, shown_tip)
    return lines


UNITS = {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}


def value_of(text: str) -> float:
    """A figure as the page writes it ("12.5/s", "1,024/s", "1.5 KiB/s") as a number."""
    m = re.fullmatch(r"([\d,.]+) ?([KMG]?i?B)?/s", text)
    assert m, text
    return float(m.group(1).replace(",", "")) * UNITS.get(m.group(2) or "B", 1)


# ------------------------------------------------------------------ tests


def test_what_sys_counts_as_drops_is_on_the_page() -> None:
    """Every $SYS counter of a drop, refusal or closure has its row and its limit (cpython_host/operations/status.py DROPS)."""
    from common.broker.settings import new_settings
    from cpython_host.operations.status import DROPS, HTTP_REFUSED

    traffic = {
        "connected", "sessions", "clients_maximum", "connections_total", "messages_received", "messages_sent",
        "bytes_received", "bytes_sent", "subscriptions", "retained", "publish_bytes_received", "publish_bytes_sent",
        "stored_bytes",
    }  # fmt: skip
    counters = {key for _, key in SYS_FIGURES} - traffic
    assert counters == {key for key, _, _ in DROPS}
    settings = new_settings()
    for key, what, limit in DROPS:
        assert what and limit(settings), key
    documented = (REPO_ROOT / "docs" / "monitoring.md").read_text()
    missing = [key for key in [*counters, HTTP_REFUSED[0]] if f"`{key}`" not in documented]
    assert not missing, f"docs/monitoring.md's status page table does not name {missing}"


def test_the_page_names_each_element_once() -> None:
    """status.js fills tables by id: a second element with the same id (two merged
    versions of a table) would stay empty on the page, whatever the data."""
    from html.parser import HTMLParser

    ids: list[str] = []

    class Ids(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            ids.extend(v for k, v in attrs if k == "id" and v)

    Ids().feed((REPO_ROOT / "cpython_host" / "operations" / "status_page" / "index.html").read_text())
    assert "bridges" in ids and "clients" in ids
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


def test_user_sees_their_own_and_no_buttons(gateway: Gateway) -> None:
    driver = gateway.page(USER)
    try:
        assert "logged in as bob: your own clients and sessions only" in body(driver)
        # Only bob's clients; the administrator's dashboard, logger and the anonymous tiny are not shown.
        clients = wait_page(driver, lambda: table(driver, "clients"))
        assert set(clients) == {"sensor-1", "sensor-2"}, clients
        assert clients["sensor-1"][1] == "bob"
        assert table(driver, "offline_sessions") == {}
        # No action anywhere: no button, no retained form, no certificates.
        assert driver.execute_script("return document.querySelectorAll('button[data-action]').length") == 0
        assert not shown(driver, "#clear-retained")
        assert not shown(driver, "#certificates")
        assert not shown(driver, "#warnings-section") and gateway.api("/api/status", USER)["warnings"] == []
        # The bridges' state and queues, as /metrics shows them; not their addresses or errors.
        bridges = wait_page(driver, lambda: (b := table(driver, "bridges")) and b["cloud"][1] == "connected" and b)
        assert bridges["cloud"][2] == NONE and bridges["cloud"][11] == NONE
        # An action sent anyway, from the page itself: 403.
        status = driver.execute_script(
            "return fetch(BASE + 'api/kick', {method: 'POST', headers: {'Content-Type': 'application/json'},"
            " body: JSON.stringify({client_id: 'sensor-2'})}).then((r) => r.status);"
        )
        assert status == 403
        gateway.broker.wait_log(r"HTTP 403 for 127\.0\.0\.1:\d+: user 'bob' is not an administrator")
        assert "sensor-2" in table(driver, "clients")
    finally:
        driver.quit()


def test_administrator_sees_the_gateway_at_a_glance(gateway: Gateway) -> None:
    g = gateway
    dev = g.devices
    # Traffic, every figure of it known: sensor-1 sends 7 QoS 1 temperatures (queued
    # for the offline logger too), sensor-2 5 QoS 0 ones (the offline logger's are
    # dropped: queue_qos0_offline is off), each a retained status, sensor-1 a
    # 200-byte message that tiny cannot take (Maximum Packet Size 64), and 3
    # messages up the cloud bridge and 2 into the backup one's queue.
    before = {
        name: (c["messages_in"], c["messages_out"])
        for c in g.api("/api/status")["clients"]
        for name in [c["client_id"]]
    }
    for i in range(7):
        dev["sensor-1"].publish("sensors/1/temperature", b"21.%d" % i, 1)
    for i in range(5):
        dev["sensor-2"].publish("sensors/2/temperature", b"19.%d" % i, 0)
    dev["sensor-1"].publish("sensors/1/status", b"online", 1, retain=True)
    dev["sensor-2"].publish("sensors/2/status", b"online", 1, retain=True)
    dev["sensor-1"].publish("big/blob", b"x" * 200, 0)
    for i in range(3):
        dev["sensor-2"].publish("up/site/power", b"%d W" % i, 1)
    for i in range(2):
        dev["sensor-2"].publish("alerts/door", b"open %d" % i, 1)
    assert len(dev["dashboard"].receive(14)) == 14  # 12 readings + 2 statuses
    assert [m.payload for m in dev["cloud"].receive(3)] == [b"0 W", b"1 W", b"2 W"]
    (logger,) = g.api("/api/status")["offline_sessions"]

    driver = g.page(ADMIN)
    try:
        assert "logged in as admin (administrator)" in body(driver)

        # The gateway itself: its name, listeners, memory, free disk, time zone; recent warnings.
        def js(expr: str) -> Any:
            return driver.execute_script("return " + expr)

        wait_page(driver, lambda: js("document.getElementById('host').textContent") == socket.gethostname())
        listeners = js("Array.from(document.querySelectorAll('#listeners li'), (li) => li.textContent)")
        assert any(line.startswith(f"127.0.0.1:{g.tls_port}: MQTT over TLS (1.2+") for line in listeners), listeners
        assert len(listeners) == len(g.broker.ports())
        assert js("document.getElementById('memory').textContent").endswith(" (resident)")
        assert " free in " in js("document.getElementById('disk').textContent")
        assert js("document.getElementById('timezone').textContent").startswith(
            "the gateway's: " + time.strftime("%Z (UTC%z)") + "; times on this page are this browser's (UTC"
        )
        warnings = wait_page(
            driver, lambda: (w := js("Array.from(document.querySelectorAll('#warnings li'), (li) => li.textContent)"))
            and any("siskin.bridge: bridge backup" in line for line in w) and w,
        )  # fmt: skip
        assert len(warnings) <= 20

        # Uplinks: cloud connected to Mosquitto's address, backup down with its error and its queue.
        def bridges_settled() -> dict[str, list[str]] | None:
            b = table(driver, "bridges")
            return b if b.get("cloud", [""])[1] == "connected" and b.get("backup", [""])[3].startswith("2 ") else None

        bridges = wait_page(driver, bridges_settled)
        assert bridges["cloud"][2] == f"127.0.0.1:{g.mosquitto.port}"
        assert bridges["cloud"][3].startswith("0 ")
        assert bridges["backup"][1] in ("down", "connecting"), bridges
        backup = next(b for b in g.api("/api/status")["bridges"] if b["name"] == "backup")
        assert backup["last_error"] and bridges["backup"][11] != NONE
        # Each bridge's local session shown with it (the backup's kept offline), not among the devices.
        assert bridges["cloud"][12] == "siskin-bridge-cloud (online)"
        assert bridges["backup"][12] == "siskin-bridge-backup (offline, kept)"
        assert not any(c["client_id"].startswith("siskin-bridge-") for c in g.api("/api/status")["clients"])
        assert any(
            line.startswith("Bridge backup is ") and "2 message(s) waiting" in line for line in attention(driver)
        )

        # Clients: user, connected since, messages in and out as counted.
        status = g.api("/api/status")
        api_clients = {c["client_id"]: c for c in status["clients"]}
        clients = wait_page(
            driver,
            lambda: (c := table(driver, "clients")) and c["dashboard"][6] == str(before["dashboard"][1] + 14) and c,
        )
        assert clients["sensor-1"][1] == "bob" and clients["dashboard"][1] == "admin" and clients["tiny"][1] == NONE
        assert clients["sensor-1"][5] == str(before["sensor-1"][0] + 7 + 1 + 1)
        assert clients["sensor-2"][5] == str(before["sensor-2"][0] + 5 + 1 + 3 + 2)
        assert clients["dashboard"][3] == "5.0"
        assert clients["dashboard"][4].startswith(hhmmss(api_clients["dashboard"]["connected_since"]) + " (")
        assert clients["tiny"][6] == "0"  # the 200-byte message was not sent to it

        # Offline devices: the logger, its 7 QoS 1 readings queued, when it left.
        offline = wait_page(driver, lambda: table(driver, "offline_sessions"))
        assert list(offline) == ["logger"]
        assert offline["logger"][1] == "admin" and offline["logger"][3] == "7"
        assert offline["logger"][2].startswith(hhmmss(logger["last_seen"]) + " (")
        assert offline["logger"][7].endswith(hhmmss(logger["expires"]))  # (with its date when not today)
        assert logger["expires"] == pytest.approx(logger["last_seen"] + 3600, abs=2)

        # Retained messages: the clients' two, not the broker's own $SYS ones.
        status = g.api("/api/status")
        assert status["retained_sys"] > 0
        wait_page(
            driver, lambda: driver.execute_script("return document.getElementById('retained').textContent") == "2"
        )
        assert (
            driver.execute_script("return document.getElementById('retained_sys').textContent")
            == f"(+{status['retained_sys']} $SYS)"
        )

        # The TLS listener's certificate: its subject, expiry date and the days left (< 30: a warning).
        certs = table(driver, "certificates")
        row = certs[f"listener 127.0.0.1:{g.tls_port}"]
        assert row[1] == "gateway.lan"
        assert row[2] == time.strftime("%Y-%m-%d", time.localtime(g.not_after))
        assert row[3] == f"{CERT_DAYS} days"
        assert "warn" in cell_classes(driver, "certificates")[f"listener 127.0.0.1:{g.tls_port}"][3]
        assert any("Certificate of listener 127.0.0.1" in line for line in attention(driver))

        # The store: size, syncs per second.
        assert re.fullmatch(
            r"[\d.]+ (B|KiB|MiB)", driver.execute_script("return document.getElementById('store-size').textContent")
        )
        assert "/s (" in driver.execute_script("return document.getElementById('store-syncs').textContent")

        # The charts: a time axis, and on hover the values of one sample, as the API has them.
        for chart, keys in (
            ("chart-messages", ("received", "sent")),
            ("chart-bytes", ("received_bytes", "sent_bytes")),
        ):
            ticks = driver.execute_script(
                f"return Array.from(document.querySelectorAll('#{chart} .axis text'), (t) => t.textContent);"
            )
            assert sum(bool(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t)) for t in ticks) >= 3, ticks
            when, *values = hover_tooltip(driver, chart)
            assert [line.partition(": ")[0] for line in values] == ["received", "sent"]
            shown_values = [value_of(line.partition(": ")[2]) for line in values]
            samples = [s for s in g.api("/api/status")["throughput"] if hhmmss(s["t"]) == when]
            assert any(
                all(v == pytest.approx(s[key], rel=0.06, abs=0.01) for v, key in zip(shown_values, keys, strict=True))
                for s in samples
            ), (when, values, samples)

        # The README's picture (`make screenshot`): the whole page, the tooltip showing.
        if os.environ.get("SISKIN_WRITE_SCREENSHOT"):
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1360, height + 140)  # (the window's frame: headless Chromium keeps ~140 px of it)
            hover_tooltip(driver, "chart-bytes")  # (again: the resize moved the chart from under the mouse)
            shot = REPO_ROOT / "docs" / "status-page.png"
            assert driver.save_screenshot(str(shot))
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # Dropped or refused, with the limit that decided.
        drops = wait_page(driver, lambda: (d := table(driver, "drops")) and d["dropped_qos0"][2] == "5" and d)
        assert "queue_qos0_offline = false" in drops["dropped_qos0"][4]
        assert drops["dropped_too_large"][2] == "1" and "Maximum Packet Size" in drops["dropped_too_large"][4]
        assert not shown(driver, "#drops tr[data-key=login_failed]")  # a counter at zero: behind "show all"
        driver.execute_script("document.getElementById('drops-all').click()")
        assert shown(driver, "#drops tr[data-key=login_failed]")
        drops = table(driver, "drops")  # each bridge's own: dead letters, QoS 0 dropped while away
        assert (
            drops["bridge cloud dead_lettered"][2] == "0"
            and "upstream refused" in drops["bridge cloud dead_lettered"][4]
        )
        assert drops["bridge backup dropped"][2] == "0" and "absent upstream" in drops["bridge backup dropped"][4]

        # The uplink goes away (Mosquitto stopped: its sockets stay silent):
        # the page says so and counts what waits; back, it drains.
        os.kill(g.mosquitto.pid, signal.SIGSTOP)
        try:
            g.broker.wait_log(r"bridge cloud: connection to \S+ lost", 30)
            for i in range(4):
                dev["sensor-2"].publish("up/site/power", b"%d W (outage)" % i, 1)
            down = wait_page(
                driver,
                lambda: (
                    (b := table(driver, "bridges"))
                    and b["cloud"][1] != "connected"
                    and b["cloud"][3].startswith("4 ")
                    and b
                ),
            )
            assert down["cloud"][1] in ("down", "connecting") and down["cloud"][11] != NONE
            assert any(
                line.startswith("Bridge cloud is ") and "4 message(s) waiting" in line for line in attention(driver)
            )
        finally:
            os.kill(g.mosquitto.pid, signal.SIGCONT)
        assert [m.payload for m in dev["cloud"].receive(4)] == [b"%d W (outage)" % i for i in range(4)]
        up = wait_page(
            driver,
            lambda: (
                (b := table(driver, "bridges"))
                and b["cloud"][1] == "connected"
                and b["cloud"][3].startswith("0 ")
                and b
            ),
        )
        assert up["cloud"][2] == f"127.0.0.1:{g.mosquitto.port}"

        # Actions. Kick the dashboard: it hears DISCONNECT 0x98 and leaves the table.
        click_and_confirm(driver, "button[data-action=kick][data-id=dashboard]", "Disconnect dashboard?")
        assert dev["dashboard"].disconnects.get(timeout=10) == 0x98
        wait_page(driver, lambda: "dashboard" not in table(driver, "clients"))
        assert message(driver) == "dashboard: disconnected"
        # Drop the offline logger's session: gone from the page and from the broker.
        click_and_confirm(
            driver, "button[data-action=drop-session][data-id=logger]", "Disconnect logger and end its session?"
        )
        wait_page(driver, lambda: table(driver, "offline_sessions") == {})
        assert message(driver) == "logger: session dropped"
        assert "logger" not in [s["client_id"] for s in g.api("/api/sessions")["sessions"]]
        # Clear the sensors' retained messages: 0 left, the $SYS ones untouched.
        driver.execute_script("document.getElementById('retained-filter').value = 'sensors/#'")
        click_and_confirm(driver, "#clear-retained button", "Clear every retained message matching sensors/#?")
        wait_page(
            driver, lambda: driver.execute_script("return document.getElementById('retained').textContent") == "0"
        )
        assert message(driver) == "2 retained message(s) matching sensors/# cleared"
        assert g.api("/api/status")["retained_sys"] > 0
        # Under its Content-Security-Policy the page broke no rule and loaded nothing that failed.
        assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()


def attention(driver: Any) -> list[str]:
    lines: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#attention li'), (li) => li.textContent);"
    )
    return lines


def message(driver: Any) -> str:
    return str(
        wait_page(driver, lambda: driver.execute_script("return document.getElementById('message').textContent"))
    )


def click_and_confirm(driver: Any, selector: str, question: str) -> None:
    """Click a button of the page and accept the confirmation it asks."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("document.getElementById('message').textContent = ''")
    driver.find_element("css selector", selector).click()
    alert = WebDriverWait(driver, 10).until(expected_conditions.alert_is_present())
    assert alert.text.startswith(question), alert.text
    alert.accept()


def test_an_action_from_another_origin_is_refused(gateway: Gateway) -> None:
    """The page's own actions carry its origin; a POST that says it comes from another site's page gets 403."""
    req = urllib.request.Request(
        gateway.url + "/api/kick",
        data=json.dumps({"client_id": "sensor-2"}).encode(),
        headers={"Content-Type": "application/json", "Origin": "http://evil.example"},
        method="POST",
    )
    status, answer = call(req, ADMIN)
    assert status == 403 and b"another origin" in answer
    assert "sensor-2" in [c["client_id"] for c in gateway.api("/api/clients")["clients"]]
    same = urllib.request.Request(
        gateway.url + "/api/kick",
        data=json.dumps({"client_id": "nobody"}).encode(),
        headers={"Content-Type": "application/json", "Origin": gateway.url},
        method="POST",
    )
    assert call(same, ADMIN)[0] == 404  # its own origin: served (no such client)
    # A bridge's own local client is no device: its session is the bridge's queue.
    for action in ("kick", "drop-session"):
        bridge = urllib.request.Request(
            gateway.url + "/api/" + action,
            data=json.dumps({"client_id": "siskin-bridge-cloud"}).encode(),
            headers={"Content-Type": "application/json", "Origin": gateway.url},
            method="POST",
        )
        status, answer = call(bridge, ADMIN)
        assert status == 409 and b"is bridge cloud's own local session" in answer, answer


def test_last_seen_table_stays_bounded() -> None:
    """A client id is network input: the last-seen table keeps the sessions
    held and at most their number plus SEEN_SLACK of ended ones."""
    from cpython_host.operations.client_figures import SEEN_SLACK, ClientFigures

    sessions = {f"kept-{i}": object() for i in range(10)}
    figures = ClientFigures(sessions, clock=lambda: 1.0)
    for client_id in sessions:
        figures.detached(client_id)
    for i in range(10_000):
        figures.detached(f"gone-{i}")
        assert len(figures.last_seen) <= 2 * len(sessions) + SEEN_SLACK + 1
    assert set(sessions) <= set(figures.last_seen)  # the sessions held keep theirs
