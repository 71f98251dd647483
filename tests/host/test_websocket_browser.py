"""A real browser: headless Chromium (driven by selenium through chromedriver)
loads a page that uses MQTT.js over a WebSocket to subscribe and publish.

The page and MQTT.js's browser bundle (node_modules/mqtt/dist/mqtt.min.js)
are served by the test over HTTP from a temporary directory, so the browser
sends a real Origin, which the broker's listener checks (origins). A paho
client on plain TCP sees the browser's message, and the browser receives
paho's: MQTT over WebSockets and over TCP are one broker.

Needs Debian's `chromium` and `chromium-driver` (tests/host/browser.py).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.host.broker_proc import REPO_ROOT, BrokerProcess, Paho, wait_until
from tests.host.browser import start_chromium

pytestmark = pytest.mark.interop

PAGE = """<!doctype html>
<meta charset="utf-8">
<title>siskin websocket test</title>
<script src="mqtt.min.js"></script>
<script>
// What the test reads back: the state, the messages received, any error.
window.result = { state: "loading", messages: [], error: null };
const url = new URLSearchParams(location.search).get("ws");
let socket = null;  // the browser's own WebSocket, kept to read what the server selected
const client = mqtt.connect(url, {
  clientId: "chromium", protocolVersion: 5, reconnectPeriod: 0,
  createWebsocket: (url, protocols) => {
    socket = new WebSocket(url, protocols);
    socket.binaryType = "arraybuffer";
    return socket;
  },
});
client.on("connect", () => {
  result.state = "connected";
  result.subprotocol = socket.protocol;
  client.subscribe("browser/in/#", { qos: 1 }, (err, granted) => {
    if (err) { result.error = String(err); return; }
    result.granted = granted.map((g) => g.qos);
    client.publish("browser/out", "hello from " + navigator.userAgent.split(" ").pop(), { qos: 1 }, (err) => {
      if (err) { result.error = String(err); return; }
      result.state = "published";
    });
  });
});
client.on("message", (topic, payload, packet) => {
  result.messages.push({ topic: topic, payload: payload.toString(), qos: packet.qos });
});
client.on("error", (err) => { result.error = String(err); });
</script>
"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """The test page and MQTT.js over HTTP on a loopback port; its origin."""
    bundle = REPO_ROOT / "node_modules" / "mqtt" / "dist" / "mqtt.min.js"
    require("MQTT.js browser bundle", bundle.is_file(), "npm ci installs node_modules/mqtt")
    root = tmp_path / "site"
    root.mkdir()
    shutil.copy(bundle, root / "mqtt.min.js")
    (root / "index.html").write_text(PAGE)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


# 5.0 [MQTT-6.0.0-4] the browser's WebSocket reports the subprotocol the server selected.
def test_chromium_publishes_and_subscribes_over_a_websocket(tmp_path: Path, site: str, browser: Any) -> None:
    listeners = [{"port": 0}, {"port": 0, "protocol": "websockets", "origins": [site]}]
    with BrokerProcess(tmp_path / "broker", listeners=listeners, limits={"sys_interval": 0}) as b:
        wait_until(lambda: len(b.ports()) == 2, 5, b.log_text)
        tcp = Paho(b.ports()[0], "tcp-side").connect()
        tcp.subscribe("browser/out", 1)
        browser.get(f"{site}/index.html?ws=ws://127.0.0.1:{b.ports()[1]}/mqtt")

        def state() -> Any:
            result = browser.execute_script("return window.result")
            assert not result["error"], result["error"] + "\n" + b.log_text()[-3000:]
            return result if result["state"] == "published" else None

        result = wait_until(state, 15, lambda: f"the page did not publish: {b.log_text()[-3000:]}")
        assert result["granted"] == [1]
        assert result["subprotocol"] == "mqtt"
        b.wait_log(r"chromium connected \(level 5")
        # The browser's message reached the TCP client ...
        msg = tcp.get()
        assert (msg.topic, msg.qos) == ("browser/out", 1) and msg.payload.startswith(b"hello from ")
        # ... and the TCP client's reach the browser, at QoS 0 and 1.
        tcp.publish("browser/in/a", b"to the page at QoS 0", 0)
        tcp.publish("browser/in/b", "à la page, QoS 1".encode(), 1)

        def received() -> Any:
            messages = browser.execute_script("return window.result.messages")
            return messages if len(messages) >= 2 else None

        messages = wait_until(received, 10, "the page did not receive both messages")
        assert sorted(messages, key=lambda m: m["topic"]) == [
            {"topic": "browser/in/a", "payload": "to the page at QoS 0", "qos": 0},
            {"topic": "browser/in/b", "payload": "à la page, QoS 1", "qos": 1},
        ]
        # MQTT.js's end(): DISCONNECT, then the WebSocket closing handshake.
        browser.execute_script("client.end()")
        b.wait_log(r"chromium disconnected \(DISCONNECT 0x00\)")
        b.wait_log(r"connection #\d+ from 127\.0\.0\.1:\d+ closed")
        tcp.close()
        assert "refused" not in b.log_text()
