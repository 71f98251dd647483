"""Births first across upstream reconnects (a bridge's `sparkplug_births`,
docs/sparkplug.md), against a real Mosquitto upstream behind a link the test
cuts (tools/link_proxy.py), with independent Sparkplug clients on both ends
(tests/host/sparkplug_sim.js: MQTT.js with Eclipse Tahu's codec): two edge
nodes publishing DATA to Siskin without pause, a host application on
Mosquitto reading every payload.

Each cut: the link goes down (every connection reset, new ones too), the
bridge's upstream session is taken over at Mosquitto by a client that
publishes a mark (so Mosquitto is done with the old connection: everything
after the mark came over the new one), the link comes back up. After each
mark the host must see each node's NBIRTH before any NDATA of it, and the
device's DBIRTH before any DDATA of it (the aliases it could not resolve
otherwise), and in the end every DATA the nodes had acknowledged.

10 cuts here; 100 in `make soak` (tests/soak/test_sparkplug_reconnects.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, node_with, require
from tests.host.bridge_edge import edge
from tests.host.broker_proc import Paho, wait_until
from tools.bench.brokers import Mosquitto
from tools.link_proxy import LinkProxy

pytestmark = pytest.mark.interop

NODES = (("press-7", "d1"), ("press-8", "d2"))


class Sim:
    """A tests/host/sparkplug_sim.js process: its JSON lines as they come."""

    def __init__(self, *args: str) -> None:
        node = node_with("mqtt")
        node_with("sparkplug-payload")
        self.proc = subprocess.Popen(
            [node, "tests/host/sparkplug_sim.js", *args],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(json.loads(line))

    def seen(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.lines)

    def acked(self) -> int:
        return max([e.get("acked", 0) for e in self.seen()] or [0])

    def stop(self) -> int:
        """Close its stdin (an edge node ends); the DATA it got acks for."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        done = wait_until(lambda: [e for e in self.seen() if e.get("done")], 30, "the edge node ends")
        return int(done[0]["acked"])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def connections(siskin: Any) -> int:
    return len(re.findall(r"bridge cloud: connected to", siskin.log_text()))


def losses(siskin: Any) -> int:
    return len(re.findall(r"bridge cloud: connection to \S+ lost", siskin.log_text()))


def node_of(topic: str) -> tuple[str, str, str]:
    """(message type, edge node, device or "") of a Sparkplug topic."""
    parts = topic.split("/")
    return parts[2], parts[3], parts[4] if len(parts) > 4 else ""


def check(events: list[dict[str, Any]]) -> dict[str, int]:
    """What the host saw, segment by segment (a mark starts one): DATA
    before its node's (device's) birth in that segment, DATA by an alias no
    birth named, births per node in each segment after a mark."""
    violations = unresolved = 0
    replays: list[int] = []
    born: dict[str, set[int]] = {}  # node or node/device -> aliases of its birth in this segment
    births = 0
    for e in events:
        if "mark" in e:
            replays.append(births)
            born = {}
            births = 0
            continue
        if "topic" not in e:
            continue
        kind, node, device = node_of(e["topic"])
        key = node + "/" + device if device else node
        if kind == "NBIRTH":
            born = {k: v for k, v in born.items() if not k.startswith(node + "/")}
            born[node] = {e["alias"]}
            births += 1
        elif kind == "DBIRTH":
            born[key] = {e["alias"]}
            births += 1
        elif kind in ("NDATA", "DDATA"):
            if key not in born or (device and node not in born):
                violations += 1
            elif e["alias"] not in born[key]:
                unresolved += 1
    replays.append(births)
    return {"violations": violations, "unresolved": unresolved, "fewest_births_after_a_mark": min(replays[1:] or [0])}


def values(events: list[dict[str, Any]], node: str) -> list[int]:
    return [e["value"] for e in events if "topic" in e and "DATA" in e["topic"] and node_of(e["topic"])[1] == node]


def reconnects(tmp_path: Path, cuts: int) -> dict[str, int]:
    """Run `cuts` link cuts under load; the counts the host application saw."""
    require("mosquitto", Mosquitto.available(), "apt-get install mosquitto")
    (tmp_path / "mosquitto").mkdir()
    mosquitto = Mosquitto(tmp_path / "mosquitto")
    mosquitto.start()
    sims: list[Sim] = []
    try:
        with LinkProxy(mosquitto.port) as link:
            host = Sim("host", str(mosquitto.port))
            sims.append(host)
            wait_until(lambda: any(e.get("ready") for e in host.seen()), 30, "the host application subscribed")
            rules = [{"pattern": "spBv1.0/#", "direction": "out", "qos": 1}]
            over = {"topic": rules, "sparkplug_births": 16, "backoff_min": 0.1, "backoff_max": 0.3}
            with edge(tmp_path / "edge", [link.port], **over) as siskin:
                nodes = [Sim("node", str(siskin.port), "Plant1", n, d) for n, d in NODES]
                sims.extend(nodes)
                births = 2 * len(NODES)
                # At least: a reconnect of the bridge before the first cut (a
                # missed 1 s keep-alive on a loaded machine) sends them again.
                wait_until(lambda: sum("BIRTH" in e.get("topic", "") for e in host.seen()) >= births, 30, "births")
                for k in range(1, cuts + 1):
                    marks = [n.acked() + 50 for n in nodes]  # under load: the nodes go on meanwhile
                    wait_until(
                        lambda m=marks: all(n.acked() >= x for n, x in zip(nodes, m, strict=True)),
                        30,
                        "the nodes publish",
                    )
                    link.down()
                    wait_until(lambda k=k: losses(siskin) >= k, 30, lambda: siskin.log_text()[-2000:])
                    # Mosquitto done with the old connection: everything after the mark is the new one's.
                    takeover = Paho(mosquitto.port, "edge1", clean=False).connect(15)
                    takeover.publish(f"mark/{k}", b"%d" % k, 1)
                    takeover.close()
                    link.up()
                    wait_until(lambda k=k: connections(siskin) > k, 30, lambda: siskin.log_text()[-2000:])

                    def data_after_mark(k: int = k) -> bool:
                        seen = host.seen()
                        at = next((i for i, e in enumerate(seen) if e.get("mark") == str(k)), None)
                        after = (
                            {node_of(e["topic"])[1] for e in seen[at:] if "DATA" in e.get("topic", "")}
                            if at is not None
                            else set()
                        )
                        return after >= {n for n, _ in NODES}

                    wait_until(data_after_mark, 30, "DATA of each node after the mark")
                sent = {name: n.stop() for (name, _), n in zip(NODES, nodes, strict=True)}

                def complete() -> bool:
                    events = host.seen()
                    return all(set(values(events, name)) >= set(range(sent[name])) for name in sent)

                wait_until(complete, 60, "every acknowledged DATA at the host")
                log = siskin.log_text()
            events = host.seen()
            counts = check(events)
            counts["cuts"] = cuts
            counts["data_acked"] = sum(sent.values())
            counts["lost"] = sum(len(set(range(sent[name])) - set(values(events, name))) for name in sent)
            counts["duplicates"] = sum(len(values(events, name)) - len(set(values(events, name))) for name in sent)
            counts["replays_logged"] = log.count("birth(s) sent again before anything else")
            return counts
    finally:
        for s in sims:
            s.kill()
        mosquitto.stop()


def test_births_first_over_10_cuts_under_load(tmp_path: Path) -> None:
    counts = reconnects(tmp_path, 10)
    print("births first, 10 cuts:", counts)
    assert (counts["violations"], counts["unresolved"], counts["lost"]) == (0, 0, 0), counts
    assert counts["fewest_births_after_a_mark"] >= 2 * len(NODES), counts  # each cut: every birth again
    assert counts["replays_logged"] >= 10, counts
