"""Measure the broker's RAM budget with _GC.mem_alloc() deltas (MicroPython).

    # on MicroPython (any port), from the repository root:
    micropython -X heapsize=220K tools/ram_budget.py boards/esp32.json
    # from CPython: run it on a port and print its JSON
    python tools/ram_budget.py --port wasm boards/esp32.json   # 32-bit, as the boards
    python tools/ram_budget.py --port unix --heap 220K boards/esp32.json
    # docs/boards.md's table (between its ram_budget markers), from the .mpy files:
    python -m tools.build --board unix
    python tools/ram_budget.py --port wasm --mpy dist/unix --write docs/boards.md boards/esp32.json

Theory of operation
-------------------
Under MicroPython this drives the sans-I/O core in memory, the way
tests/core/harness.py does (bytes in, bytes out, no sockets), and reads
_GC.mem_alloc() after gc.collect() before and after each step. It prints ONE
JSON object (the last line of its output) with, in bytes:

  startup         firmware/app.py build() with the board file and a default
                  device config (store on: a littlefs log, no key file): the
                  heap the firmware holds once started, before any client
  code            the part of `startup` that stays when the server and broker
                  are dropped: the loaded code (bytecode from .mpy or .py,
                  module dicts, classes; frozen into flash on a custom image,
                  where only the dicts and classes take heap). Only what the
                  default configuration loads: SCRAM, HKDF, AES-GCM, the
                  raw-flash log and the bridge are imported only when
                  configured, and start-up-only modules are unloaded
                  (firmware/startup_only.py). From CPython, the least of
                  LAYOUTS runs, each with the heap shifted by a padding
                  allocated first (`code_layouts`: every run's figure):
                  MicroPython's collector is conservative, and a word of
                  bytecode or data that happens to hold the address of a
                  freed object keeps it alive; that only ever adds (up to
                  3 KB was seen), and which layout it hits moves with any
                  change of the code, so the least is the code's own figure
  shell_slot      one preallocated connection slot of firmware/shell.py
                  (read buffer of `read_buffer` bytes + bookkeeping)
  baseline        Broker(board settings) right after start-up: with prealloc
                  every pooled object (sessions, subscriptions, message slabs)
                  is already in here
  per_client      one more connected client (CONNECT with a 10-byte client
                  id, clean session), beyond the preallocated pools
  per_subscription  one more subscription of a connected client (a
                  distinct 3-level filter)
  per_queued      one more QoS 1 message (64-byte payload, 10-byte topic)
                  queued for an offline persistent session
  per_retained    one more retained message (64-byte payload, distinct
                  3-level topic)
  per_queued_stored, per_retained_stored
                  the same with the store on (firmware/storage.py's littlefs
                  log, not encrypted): adds the store's RAM index entries
                  (the record data itself is on flash)
  sn_code         the SN modules a board loads with the device config's
                  "mqttsn" object (firmware/sn.py, common/mqttsn/*): their
                  code in the heap (docs/mqtt-sn.md "Figures (boards)")
  per_sn_client   one more MQTT-SN client connected through the core's
                  gateway (CONNECT with a 10-byte client id, clean): its
                  SnClient, MQTT client and broker session
  per_sn_topic_id one more topic id an SN client REGISTERed (a distinct
                  3-level topic name)
  at_limits       the heap in use with the board at its limits: every
                  connection slot filled, max_connections clients each with
                  min(max_subscriptions_per_client, ...) subscriptions,
                  max_retained retained messages and the message pool
                  queued for an offline session (see _at_limits)
  heap            _GC.mem_free() + _GC.mem_alloc() (the port's whole heap)
  modules         the modules of common/ and firmware/ that stay loaded after
                  the start-up (what `code` holds); from CPython with --mpy,
                  `mpy_bytes` is the size of their .mpy files

With --write FILE (from CPython) the figures also replace the table between
the ram_budget markers of that Markdown file (docs/boards.md): figures in the
docs come from this tool, never typed by hand.

The per-item figures are averages over `N` items, measured with prealloc off
(objects are created on use) and the per-client rate limits off (NO_RATES:
N subscriptions in one second would put a board's client in debt), so each
is the full cost of one more item; the baseline and at_limits figures use
the board's settings as they are.

Under CPython (`--port wasm` or `--port unix`) it runs itself on that port
and relays the JSON: the wasm port is the 32-bit MicroPython 1.27 of
@micropython/micropython-webassembly-pyscript (npm; 4-byte words like the
ESP32 and RP2040), whose heap grows on demand so only deltas mean anything;
the unix port is 64-bit (objects about twice as big) with a real cap
(`--heap`), which shows whether the board settings fit at 2x.
"""

import gc
import json
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _module(name: str) -> "Any":
    """Import the code under measurement by name (it runs on MicroPython; the
    host's type checker covers it through its own entry points, not this tool)."""
    return __import__(name, None, None, ["_"])


# MicroPython's gc (mem_alloc/mem_free); typed loosely for the host's checker.
_GC: "Any" = gc


N = 20  # items per averaged measurement
PAYLOAD = b"x" * 64


def _alloc() -> int:
    gc.collect()
    gc.collect()
    return int(_GC.mem_alloc())


# ---------------------------------------------------------------- in memory


class Driver:
    """Clients of one in-memory broker; the output is read and thrown away."""

    def __init__(self, broker: "Any") -> None:
        FrameReader = _module("common.mqtt.codec").FrameReader
        self.broker = broker
        self.now = 1000
        self.FrameReader = FrameReader

    def connect(self, client_id: str, clean: bool = True, level: int = 4) -> int:
        packets = _module("common.mqtt.packets")
        Connect, encode_packet = packets.Connect, packets.encode_packet

        cid = self.broker.connection_made(self.now)
        if cid < 0:
            return -1
        pkt = Connect(level=level, clean_start=clean, keep_alive=60, client_id=client_id)
        self.send(cid, encode_packet(pkt, level))
        return int(cid)

    def send(self, cid: int, data: bytes) -> None:
        self.broker.data_received(cid, data, self.now)
        self.pump()

    def pump(self) -> None:
        broker = self.broker
        cid = broker.output.next_dirty()
        while cid >= 0:
            broker.output.take(cid)
            if broker.output.is_closing(cid):
                broker.connection_lost(cid, self.now)
            cid = broker.output.next_dirty()

    def subscribe(self, cid: int, flt: str, qos: int, pid: int = 1) -> None:
        packets = _module("common.mqtt.packets")
        Subscribe, encode_packet = packets.Subscribe, packets.encode_packet

        self.send(cid, encode_packet(Subscribe(pid, [(flt, qos)], None), 4))

    def publish(self, cid: int, topic: str, payload: bytes, qos: int, retain: bool = False, pid: int = 1) -> None:
        packets = _module("common.mqtt.packets")
        Publish, encode_packet = packets.Publish, packets.encode_packet

        self.send(cid, encode_packet(Publish(topic, payload, qos, retain, False, pid, None), 4))
        # The in-memory publisher's PUBACK/PUBREC answers are discarded; QoS 2
        # needs the PUBREL to free the packet id.
        if qos == 2:
            PubAck = packets.PubAck
            self.send(cid, encode_packet(PubAck(6, pid, 0, None), 4))

    def drop(self, cid: int) -> None:
        self.broker.connection_lost(cid, self.now)
        self.pump()


def _entropy(n: int) -> bytes:
    return bytes(n)


def _settings(board: str, **overrides: "Any") -> "tuple[Any, dict[str, Any]]":
    settings, server = _module("firmware.boardcfg").load_board(board)
    _module("common.broker.settings").update_settings(settings, overrides)
    return settings, server


# The measurement is a sequence of steps; the runner reads _GC.mem_alloc()
# after a full collection before and after each one. On the wasm port that
# collection must happen between two runPython calls (outside any Python
# frame: its GC scans the WebAssembly stack conservatively, so garbage still
# referenced from a live C frame would count), so the steps are separate
# functions rather than one loop, and the state lives in STATE.
STEPS = (
    "startup",
    "drop_startup",
    "settings",
    "shell_slot",
    "free_slots",
    "baseline",
    "at_limits",
    "free_broker",
    "items_setup",
    "per_client",
    "per_subscription",
    "offline_setup",
    "per_queued",
    "per_retained",
    "free_items",
    "stored_setup",
    "per_queued_stored",
    "per_retained_stored",
    "free_stored",
    "sn_code",
    "sn_setup",
    "per_sn_client",
    "per_sn_topic_id",
)
STATE: "dict[str, Any]" = {}
RESULT: "dict[str, Any]" = {}


def begin(board: str) -> None:
    STATE.clear()
    RESULT.clear()
    RESULT["board"] = board
    STATE["board"] = board


def step(name: str) -> int:
    """Run one step; how many items it made (0: not a measurement)."""
    return int(globals()["_step_" + name]())


def record(name: str, items: int, delta: int) -> None:
    if name == "drop_startup":
        RESULT[name] = delta  # (negative: what was freed)
    elif items:
        RESULT[name] = delta // items


def finish() -> "dict[str, Any]":
    RESULT["code"] = RESULT["startup"] + RESULT.pop("drop_startup")
    lim = RESULT["at_limits"] = STATE["at_limits"]
    lim["dynamic"] = RESULT.pop("at_limits_dynamic")
    lim["total"] = RESULT["baseline"] + lim["dynamic"] + lim["slots"] * RESULT["shell_slot"]
    gc.collect()
    RESULT["heap"] = _GC.mem_free() + _GC.mem_alloc()
    return RESULT


STARTUP_STORE = "ram_budget.startup.store"
STARTUP_CONFIG = "ram_budget.siskin.json"


def _step_startup() -> int:
    # The firmware's own start-up (no Wi-Fi, no watchdog, no listening
    # socket yet): what a board holds before its first client.
    import os

    for path in (STARTUP_STORE, STARTUP_CONFIG):
        try:
            os.remove(path)
        except OSError:
            pass
    device = {"board": STATE["board"], "host": "127.0.0.1", "watchdog_ms": 0, "log_level": "warning"}
    device["storage"] = STARTUP_STORE
    device["storage_key_file"] = STARTUP_STORE + ".no-key"
    with open(STARTUP_CONFIG, "w") as f:
        f.write(json.dumps(device))
    if not hasattr(os, "urandom"):  # the wasm port: the entropy of the session ids only
        import sys

        sys.modules["os"] = _OsWithUrandom(os)  # type: ignore[assignment]
    STATE["started"] = _module("firmware.app").build(["--config", STARTUP_CONFIG], "")
    return 1


class _OsWithUrandom:
    def __init__(self, os: "Any") -> None:
        self.os = os
        self.urandom = _entropy

    def __getattr__(self, name: str) -> "Any":
        return getattr(self.os, name)


def _step_drop_startup() -> int:
    # What is left after the server and broker are gone is the code.
    del STATE["started"]
    return 1


def _step_settings() -> int:
    # (Not a measurement: the modules the start-up left loaded are listed
    # here, before this step loads the board's reader again.)
    RESULT["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("common", "firmware"))
    settings, server = _settings(STATE["board"])
    STATE["settings"] = settings
    STATE["server"] = server
    RESULT["settings"] = {
        "max_connections": settings.max_connections,
        "max_sessions": settings.max_sessions,
        "max_subscriptions": settings.max_subscriptions,
        "max_subscriptions_per_client": settings.max_subscriptions_per_client,
        "max_messages": settings.max_messages,
        "max_queued_messages": settings.max_queued_messages,
        "max_retained": settings.max_retained,
        "max_packet_size": settings.max_packet_size,
        "max_sockets": server["max_sockets"],
        "read_buffer": server["read_buffer"],
    }
    return 0


def _step_shell_slot() -> int:
    Slot = _module("firmware.shell").Slot
    size = STATE["server"]["read_buffer"]
    STATE["slots"] = [Slot(i, size) for i in range(N)]
    return N


def _step_free_slots() -> int:
    del STATE["slots"]
    return 0


def _step_baseline() -> int:
    # As a board has its broker after the start-up: the start-up-only
    # modules that making it loaded (common/broker/broker_setup.py) unloaded
    # again, as firmware/app.py does, so that this figure is the broker's
    # objects and not that code.
    Broker = _module("common.broker.broker").Broker
    before = set(sys.modules)
    STATE["broker"] = Broker(STATE["settings"], _entropy)
    unload = _module("common.compat").unload
    for name in _module("firmware.startup_only").STARTUP_ONLY:
        if name not in before:
            unload(name)
    return 1


def _step_at_limits() -> int:
    STATE["at_limits"] = _at_limits(STATE["broker"], STATE["settings"], STATE["server"])
    RESULT["at_limits_dynamic"] = 0  # filled by record()
    return 1


def _step_free_broker() -> int:
    del STATE["broker"]
    return 0


# The per-item steps make their items faster than a board's rate limits let
# one client (rate_subscribes 10/s): the limits are off there, so that every
# item is made and no hold (rate_hold.py, loaded by the first) is counted.
NO_RATES = {"rate_messages": 0, "rate_bytes": 0, "rate_subscribes": 0}


def _step_items_setup() -> int:
    # Per-item costs: prealloc off, generous pools, so each item is new.
    Broker = _module("common.broker.broker").Broker
    big, _ = _settings(
        STATE["board"],
        **NO_RATES,
        prealloc=False,
        max_connections=4 * N,
        max_sessions=4 * N,
        max_subscriptions=8 * N,
        max_subscriptions_per_client=4 * N,
        max_messages=8 * N,
        max_queued_messages=4 * N,
        max_queued_bytes=1 << 20,
        max_retained=4 * N,
        max_retained_bytes=1 << 20,
        match_cache_bytes=0,
    )
    d = Driver(Broker(big, _entropy))
    # Warm up: the first client, subscription and message create shared
    # structures (trie root, dict resizes) that are not per item.
    c0 = d.connect("warm-up-00")
    d.subscribe(c0, "w/0/0", 1)
    d.publish(c0, "w/0/1", PAYLOAD, 0, True)
    STATE["d"] = d
    STATE["c0"] = c0
    return 0


def _step_per_client() -> int:
    d = STATE["d"]
    STATE["cids"] = [d.connect(f"client-{i:03d}") for i in range(N)]
    return N


def _step_per_subscription() -> int:
    d = STATE["d"]
    cid = STATE["cids"][0]
    for i in range(N):
        d.subscribe(cid, f"s/{i}/+", 1, pid=i + 1)
    return N


def _step_offline_setup() -> int:
    # An offline persistent session with one QoS 1 subscription.
    d = STATE["d"]
    off = d.connect("offline-00", clean=False)
    d.subscribe(off, "q/t/x", 1)
    d.drop(off)
    return 0


def _step_free_items() -> int:
    del STATE["d"], STATE["c0"], STATE["cids"]
    return 0


STORE_PATH = "ram_budget.store"


def _step_stored_setup() -> int:
    # As items_setup + offline_setup, with the board's store (a littlefs log).
    import os

    try:
        os.remove(STORE_PATH)
    except OSError:
        pass
    Store = _module("common.store.store").Store
    open_file_log = _module("common.store.filelog_open").open_file_log
    LittleFS = _module("firmware.littlefs_fs").LittleFS
    big, _ = _settings(
        STATE["board"],
        **NO_RATES,
        prealloc=False,
        max_messages=8 * N,
        max_queued_messages=4 * N,
        max_queued_bytes=1 << 20,
        max_retained=4 * N,
        max_retained_bytes=1 << 20,
        match_cache_bytes=0,
    )
    store = Store(open_file_log(LittleFS(), STORE_PATH, compact_min=1 << 20))
    _module("common.store.store_open").open_records(store)
    broker = _module("common.store.storeboot").new_broker(big, _entropy, store)
    broker.restore(1, 1)
    d = Driver(broker)
    c0 = d.connect("warm-up-00")
    d.publish(c0, "w/0/1", PAYLOAD, 0, True)
    off = d.connect("offline-00", clean=False)
    d.subscribe(off, "q/t/x", 1)
    d.drop(off)
    d.publish(c0, "q/t/x", PAYLOAD, 1, pid=1)  # the first record of each kind
    STATE["d"] = d
    STATE["c0"] = c0
    return 0


def _queue_n(first_pid: int) -> int:
    """N QoS 1 messages for the offline session's queue."""
    d = STATE["d"]
    for i in range(N):
        d.publish(STATE["c0"], "q/t/x", PAYLOAD, 1, pid=first_pid + i)
    return N


def _retain_n() -> int:
    """N retained messages on distinct topics."""
    d = STATE["d"]
    for i in range(N):
        d.publish(STATE["c0"], f"r/{i}/x", PAYLOAD, 0, True)
    return N


def _step_per_queued_stored() -> int:
    return _queue_n(2)  # pid 1 went with the warm-up


def _step_per_retained_stored() -> int:
    return _retain_n()


def _step_per_queued() -> int:
    return _queue_n(1)


def _step_per_retained() -> int:
    return _retain_n()


def _step_free_stored() -> int:
    del STATE["d"], STATE["c0"]
    return 0


# ---------------------------------------------------------------- MQTT-SN


def _step_sn_code() -> int:
    for name in ("firmware.sn", "common.mqttsn.settings"):
        _module(name)
    return 1


def _sn_send(addr: "Any", mtype: int, **fields: "Any") -> None:
    codec = _module("common.mqttsn.codec")
    gw = STATE["gw"]
    gw.datagram_received(addr, codec.encode_message(codec.SnMessage(mtype, **fields)))
    gw.pump()
    gw.take_datagrams()


def _step_sn_setup() -> int:
    # The core's gateway over a real driver (common/startup.py), prealloc off
    # and generous pools, so each SN client and topic id is new; one warm-up
    # client with one topic id makes the shared structures.
    startup = _module("common.startup")
    Gateway = _module("common.mqttsn.gateway").Gateway
    sn_settings = _module("common.mqttsn.settings").sn_settings
    big, _ = _settings(
        STATE["board"], prealloc=False, max_connections=4 * N, max_sessions=4 * N, match_cache_bytes=0
    )
    driver = startup.assemble(big, _entropy, None, lambda: 1000, (0, 0), None, (lambda level, text: None, 50))
    cfg = {"max_clients": 4 * N, "max_topic_ids": 4 * N}
    STATE["gw"] = Gateway(driver, sn_settings("ram_budget", cfg, True, 0), lambda: 1000, str, lambda: None)
    _sn_connect(("warm-up", 0), "warm-up-00")
    _sn_send(("warm-up", 0), 0x0A, topic_name="w/0/0", msg_id=1)
    return 0


def _sn_connect(addr: "Any", client_id: str) -> None:
    _sn_send(addr, 0x04, clean=True, duration=60, client_id=client_id)  # CONNECT (v1.2 §5.4.4)


def _step_per_sn_client() -> int:
    for i in range(N):
        _sn_connect(("sn", i), f"sn-cl-{i:03d}")
    return N


def _step_per_sn_topic_id() -> int:
    for i in range(N):
        _sn_send(("sn", 0), 0x0A, topic_name=f"t/{i}/x", msg_id=i + 2)  # REGISTER (§5.4.10)
    return N


def measure(board: str) -> "dict[str, Any]":
    """Every step in this interpreter; the result dict."""
    begin(board)
    for name in STEPS:
        a = _alloc()
        items = step(name)
        delta = _alloc() - a
        record("at_limits_dynamic" if name == "at_limits" else name, items, delta)
    return finish()


def _at_limits(broker: "Any", settings: "Any", server: "dict[str, Any]") -> "dict[str, Any]":
    """Fill the board to its limits; what was filled.

    max_connections clients; enough offline persistent sessions (within
    max_sessions) to queue the whole message pool but max_retained, each with
    max_queued_messages QoS 1 messages; the subscriptions left shared among
    the clients (at most max_subscriptions_per_client each); max_retained
    retained messages. Payloads are 64 bytes.
    """
    s = settings
    d = Driver(broker)
    per_queue = s.max_queued_messages
    to_queue = s.max_messages - s.max_retained
    offline = (to_queue + per_queue - 1) // per_queue
    if offline > s.max_sessions - s.max_connections:
        offline = s.max_sessions - s.max_connections
    # The offline sessions first: connected, they would count against max_connections.
    for k in range(offline):
        off = d.connect(f"offline-{k:02d}", clean=False)
        d.subscribe(off, f"q/{k}/#", 1)
        d.drop(off)
    cids = []
    for i in range(s.max_connections):
        cid = d.connect(f"client-{i:03d}")
        if cid >= 0:
            cids.append(cid)
    per = (s.max_subscriptions - offline) // len(cids)
    if per > s.max_subscriptions_per_client:
        per = s.max_subscriptions_per_client
    subs = 0
    for cid in cids:
        for j in range(per):
            d.subscribe(cid, f"dev/{cid}/{j}", 1, pid=j + 1)
            subs += 1
    pub = cids[0]
    pid = 0
    queued = 0
    for k in range(offline):
        for _ in range(per_queue if to_queue - queued > per_queue else to_queue - queued):
            pid = pid % 60000 + 1
            d.publish(pub, f"q/{k}/x", PAYLOAD, 1, pid=pid)
            queued += 1
    for i in range(s.max_retained):
        d.publish(pub, f"r/{i}/x", PAYLOAD, 0, True)
    st = broker.stats
    return {
        "clients": len(cids),
        "subscriptions": subs + offline,
        "offline_sessions": offline,
        "queued": queued - st.dropped_queue_full - st.dropped_queue_total - st.dropped_no_slab,
        "sessions": broker.sessions.count(),
        "retained": s.max_retained - st.dropped_retained,
        "messages_in_pool": broker.routing.messages.in_use(),
        "slots": server["max_sockets"] - 1,
    }


# ------------------------------------------------------------------- CPython


# The heap shifts (bytes allocated before the start-up) of the runs whose
# least `code` is taken (see `code` above).
LAYOUTS = (0, 16, 48, 112, 240, 496)


def _run_on_port(port: str, board: str, heap: str, code: str, exe: str = "", pad: int = 0) -> "dict[str, Any]":
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if port == "unix":
        exe = exe or os.path.join(os.path.dirname(sys.executable), "micropython")
        env = dict(os.environ, MICROPYPATH=(os.path.join(root, code) + ":" if code else "") + root + ":.frozen")
        cmd = [exe, "-X", "heapsize=" + heap, "tools/ram_budget.py", board, str(pad)]
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    else:
        script = (
            _WASM_JS.replace("@ROOT@", json.dumps(root))
            .replace("@BOARD@", json.dumps(board))
            .replace("@CODE@", json.dumps(code))
            .replace("@PAD@", str(pad))
        )
        proc = subprocess.run(
            ["node", "--input-type=module", "-e", script], cwd=root, capture_output=True, text=True, timeout=300
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        # (Node prints the minified line of the port's module with an error: skip long lines.)
        text = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if len(line) < 400)
        sys.stderr.write(text[-3000:] + "\n")
        raise SystemExit(f"ram_budget: the {port} run failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1])
    result["port"] = port
    return result


# Copies common/, firmware/, boards/ and this file into the wasm port's
# in-memory file system (it cannot see the host's) and runs measure().
_WASM_JS = """
import fs from "node:fs";
import path from "node:path";
const root = @ROOT@;
const { loadMicroPython } = await import(path.join(root, "node_modules/@micropython/micropython-webassembly-pyscript/micropython.mjs"));
let out = "";
const mp = await loadMicroPython({ heapsize: 1 << 20, stdout: (l) => { out += l + "\\n"; }, stderr: (l) => process.stderr.write(l + "\\n") });
function copy(rel) {
  const src = path.join(root, rel), dst = "/siskin/" + rel;
  if (fs.statSync(src).isDirectory()) {
    mp.FS.mkdirTree(dst);
    for (const n of fs.readdirSync(src)) {
      if (n === "__pycache__") continue;
      if (/[.](py|mpy|json)$/.test(n) || fs.statSync(path.join(src, n)).isDirectory()) copy(rel + "/" + n);
    }
  } else { mp.FS.mkdirTree(path.posix.dirname(dst)); mp.FS.writeFile(dst, fs.readFileSync(src)); }
}
// From a tools/build output (.mpy, as a board loads them) or the sources.
const code = @CODE@;
for (const d of ["common", "firmware"]) copy(code ? code + "/" + d : d);
if (code) { mp.FS.rename("/siskin/" + code + "/common", "/siskin/common"); mp.FS.rename("/siskin/" + code + "/firmware", "/siskin/firmware"); }
for (const d of ["boards", "tools/ram_budget.py"]) copy(d);
mp.runPython(`
import os, sys, gc
os.chdir("/siskin")
sys.path.insert(0, "/siskin/tools")
sys.path.insert(0, "/siskin")
import ram_budget, json
ram_budget.begin(${JSON.stringify(@BOARD@)})
_layout = bytearray(@PAD@)
`);
// Collect between runPython calls, outside any Python frame (see STEPS).
const alloc = () => { mp.runPython("gc.collect()"); mp.runPython("gc.collect(); _m = gc.mem_alloc()"); return mp.globals.get("_m"); };
mp.runPython("_steps = json.dumps(ram_budget.STEPS)");
const steps = JSON.parse(mp.globals.get("_steps"));
for (const name of steps) {
  const a = alloc();
  mp.runPython(`_n = ram_budget.step(${JSON.stringify(name)})`);
  const items = mp.globals.get("_n");
  const delta = alloc() - a;
  const key = name === "at_limits" ? "at_limits_dynamic" : name;
  mp.runPython(`ram_budget.record(${JSON.stringify(key)}, ${items}, ${delta})`);
}
mp.runPython("print(json.dumps(ram_budget.finish()))");
process.stdout.write(out);
"""


def _cpython_main(argv: list[str]) -> None:
    import argparse
    import os

    ap = argparse.ArgumentParser(description="RAM budget of the broker, measured on a MicroPython port")
    ap.add_argument("board", help="board settings file, e.g. boards/esp32.json")
    ap.add_argument("--port", choices=("wasm", "unix"), default="wasm")
    ap.add_argument("--heap", default="220K", help="unix port heap cap (-X heapsize)")
    ap.add_argument(
        "--mpy", default="", help="load common/ and firmware/ from this tools/build output (e.g. dist/unix)"
    )
    ap.add_argument(
        "--micropython",
        default="",
        help="the unix port to run (--port unix; default: the venv's, 64-bit), e.g. a 32-bit build from source",
    )
    ap.add_argument("--write", default="", help="replace the ram_budget table of this Markdown file (docs/boards.md)")
    args = ap.parse_args(argv)
    code = args.mpy.rstrip("/")
    if os.path.isabs(code):  # (the wasm run names it from the repository's root)
        code = os.path.relpath(code, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    exe = os.path.abspath(args.micropython) if args.micropython else ""
    runs = [_run_on_port(args.port, args.board, args.heap, code, exe, pad) for pad in LAYOUTS]
    result = runs[0]
    result["code_layouts"] = [r["code"] for r in runs]
    result["code"] = min(result["code_layouts"])
    if code:
        result["mpy_bytes"] = sum(os.path.getsize(_mpy_file(code, name)) for name in result["modules"])
    print(json.dumps(result))
    if args.write:
        mpy = f" --mpy {code}" if code else ""
        _write_table(args.write, _table(result, f"python tools/ram_budget.py --port {args.port}{mpy} --write {args.write} {args.board}"))


def _mpy_file(code: str, name: str) -> str:
    import os

    path = os.path.join(code, *name.split("."))
    return path + ".mpy" if os.path.exists(path + ".mpy") else os.path.join(path, "__init__.mpy")


BEGIN = "<!-- ram_budget:begin (generated by python tools/ram_budget.py --write; do not edit) -->"
END = "<!-- ram_budget:end -->"


def _table(r: "dict[str, Any]", command: str) -> str:
    import datetime
    import platform
    import subprocess

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    root = __file__.rsplit("/tools/", 1)[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d at %H:%M UTC")
    port = "32-bit wasm port (MicroPython 1.27)" if r["port"] == "wasm" else "unix port"
    source = "the code loaded from .mpy files (tools/build)" if "mpy_bytes" in r else "the code compiled from the sources"
    lim = r["at_limits"]
    filled = f"{lim['clients']} clients, {lim['subscriptions']} subscriptions, {lim['queued']} queued, {lim['retained']} retained"
    rows = [
        ("code of the default start-up (`code`)", f"**{r['code']:,} B**"),
        (
            "`code` of each run, the heap shifted by " + " / ".join(str(p) for p in LAYOUTS) + " B (the least is `code`)",
            " / ".join(f"{c:,}" for c in r["code_layouts"]) + " B",
        ),
        ("heap after the start-up, no client (`startup`)", f"{r['startup']:,} B"),
        ("connected client, core only (`per_client`)", f"**{r['per_client']:,} B**"),
        ("connection slot of the shell (`shell_slot`)", f"{r['shell_slot']:,} B"),
        ("broker with its pools, no client (`baseline`)", f"{r['baseline']:,} B"),
        ("subscription / queued QoS 1 message / retained message", f"{r['per_subscription']} / {r['per_queued']} / {r['per_retained']} B"),
        (f"at the limits ({filled})", f"{lim['total']:,} B"),
    ]
    modules = f"{len(r['modules'])} modules"
    if "mpy_bytes" in r:
        modules += f", {r['mpy_bytes']:,} B of .mpy"
    lines = [
        BEGIN,
        f"Measured by `{command}` on {when} ({cpu}, commit {commit}), on the {port}, {source}:",
        "",
        f"| `{r['board']}` | |",
        "|---|---|",
    ]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines.append(f"| modules left loaded after the start-up | {modules}: " + ", ".join(f"`{m}`" for m in r["modules"]) + " |")
    lines.append(END)
    return "\n".join(lines)


def _write_table(path: str, text: str) -> None:
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"ram_budget: {path} has no {BEGIN} ... {END} markers")
    head, rest = doc.split(BEGIN, 1)
    with open(path, "w") as f:
        f.write(head + text + rest.split(END, 1)[1])


def main() -> None:
    if sys.implementation.name != "micropython":
        _cpython_main(sys.argv[1:])
        return
    args = sys.argv[1:]
    board = args[0] if args else "boards/esp32.json"
    layout = bytearray(int(args[1]) if len(args) > 1 else 0)  # (a heap shift: LAYOUTS)
    print(json.dumps(measure(board)))
    del layout


if __name__ == "__main__":
    main()
