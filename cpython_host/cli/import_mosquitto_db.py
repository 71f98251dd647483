"""`siskin import-mosquitto-db FILE --data-dir DIR`: Mosquitto's saved state into a Siskin store.

Mosquitto keeps its state in mosquitto.db (cpython_host/mosquitto_db.py
reads it): retained messages, persistent sessions (3.1.1 clean session 0,
v5 Session Expiry > 0), their subscriptions and the messages queued or in
flight for them. This writes the same state into a new Siskin store in DIR
through the core's own persistence (common/store/persist.py: the records a
running broker writes), so the next `siskin --data-dir DIR` restores it as
its own: the same clients find their sessions, subscriptions, queued
messages (in order, with the packet ids they were sent with) and the
retained messages.

A Mosquitto bridge's queue (its local context, client id
local.REMOTE_CLIENTID or its local_clientid, saved with expiry 0) becomes
the queue of the Siskin bridge of --config that converts it (the local
session common/bridge/bridge.py keeps, owned by bridge:NAME): the first
start sends it up. Without that [[bridge]] it is left out, by name.

What Mosquitto holds that has no place here is counted and said, never
dropped quietly: an expired message or session, a message whose record is
missing. An inbound QoS 2 message Mosquitto acknowledged (PUBREC) but had
not yet released is delivered now to the imported sessions it matches, and
its packet id remembered so that the client's PUBREL does not deliver it
twice (Siskin's own order for QoS 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from common.bridge.bridge import Bridge
from common.broker.session import NEVER
from common.broker.topics import topic_matches
from common.mqtt import consts as C
from common.mqtt.properties import decode_properties
from common.store.store import StoreError
from cpython_host.config import ConfigError, load_config
from cpython_host.mosquitto import db as M
from cpython_host.runtime.storage import LOG_NAME, open_store

EPILOG = """\
examples:
  sudo systemctl stop mosquitto                   (it writes the file when it stops)
  siskin convert-mosquitto-conf /etc/mosquitto/mosquitto.conf -o /etc/siskin/siskin.toml
  sudo siskin import-mosquitto-db /var/lib/mosquitto/mosquitto.db --data-dir /var/lib/siskin \
      --config /etc/siskin/siskin.toml        (its [[bridge]] tables take Mosquitto's bridge queues)
  sudo chown -R siskin: /var/lib/siskin

The data directory must hold no Siskin store yet (a new one is made). With
--config, the [limits] of the broker that will serve it apply (a session or
queue beyond them is refused here, not at its start), and its [[bridge]]
tables take the queues of Mosquitto's bridges. Encrypted stores take
--store-key-file or SISKIN_STORE_KEY, as the broker does.

exit status: 0 imported, 1 nothing written (an error is said), 2 bad command line.
"""

# Mosquitto's outgoing states -> what Siskin's delivery is (None: not sent yet).
SENT_STATES = (M.MS_WAIT_FOR_PUBACK, M.MS_WAIT_FOR_PUBREC)
RELEASED_STATES = (M.MS_RESEND_PUBREL, M.MS_WAIT_FOR_PUBCOMP)
INBOUND_UNRELEASED = (M.MS_WAIT_FOR_PUBREL, M.MS_SEND_PUBREC)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="siskin import-mosquitto-db",
        description="Bring Mosquitto's persistence file (mosquitto.db, Mosquitto 1.6 and 2.0) into a new\n"
        "Siskin store: retained messages, persistent sessions with their owners, subscriptions\n"
        "and the messages queued or in flight for them. Stop Mosquitto first: it writes the\n"
        "file when it stops (and every autosave_interval).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="the mosquitto.db (persistence_location + persistence_file)")
    p.add_argument("--data-dir", required=True, metavar="DIR", help="the Siskin data directory to create")
    p.add_argument("--config", metavar="FILE", help="the Siskin config whose [limits] will serve it")
    p.add_argument("--store-key-file", metavar="FILE", help="encrypt the store (as the broker's option)")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        db = M.read(args.file)
        cfg = load_config(args.config)
    except (M.MosquittoDbError, ConfigError) as e:
        print(f"siskin import-mosquitto-db: {e}", file=sys.stderr)
        return 1
    data_dir = os.path.abspath(args.data_dir)
    if os.path.exists(os.path.join(data_dir, LOG_NAME)):
        print(
            f"siskin import-mosquitto-db: {data_dir} holds a Siskin store already ({LOG_NAME}); "
            "import into a new directory",
            file=sys.stderr,
        )
        return 1
    key = None
    if args.store_key_file is not None:
        with open(args.store_key_file) as f:
            key = f.read()
    key = key or os.environ.get("SISKIN_STORE_KEY") or None
    from cpython_host.runtime.run import make_broker

    try:
        store = open_store(data_dir, key)
    except (StoreError, OSError) as e:
        print(f"siskin import-mosquitto-db: store in {data_dir}: {e}", file=sys.stderr)
        return 1
    try:
        broker = make_broker(cfg, store)
        counts = write(db, broker, int(time.time()), cfg.bridges)
        store.sync()
    finally:
        store.close()
    print(
        f"imported from {args.file} into {data_dir}: {counts['sessions']} sessions, "
        f"{counts['subscriptions']} subscriptions, {counts['queued']} queued and {counts['inflight']} "
        f"in-flight messages, {counts['retained']} retained messages"
    )
    for client_id, (name, _filters, queued) in sorted(counts["bridges"].items()):
        print(
            f"  bridge {name}: {queued} message(s) for its upstream, from Mosquitto's bridge queue into "
            f"the bridge's session {client_id} (sent up at the first start)"
        )
    for what in counts["left"]:
        print(f"  left out: {what}")
    return 0


def write(db: M.MosquittoDb, broker: Any, now: int, bridges: Sequence[Any] = ()) -> dict[str, Any]:
    """Write `db`'s state through `broker`'s persistence listener (core time = wall time here).
    `bridges`: the BridgeSettings of the config: a Mosquitto bridge's local context whose
    [[bridge]] is among them becomes that bridge's local session, its queue the bridge's."""
    persist = broker.listener
    persist.offset = 0
    routing = broker.routing
    counts: dict[str, Any] = {"sessions": 0, "subscriptions": 0, "queued": 0, "inflight": 0, "retained": 0}
    left: list[str] = list(db.skipped)
    counts["left"] = left
    messages: dict[int, Any] = {}

    def message(store_id: int, retain: bool) -> Any:
        """The core message of a stored one (made once), or None: missing or expired."""
        msg = messages.get(store_id)
        if msg is None:
            m = db.messages.get(store_id)
            if m is None or (m.expiry and m.expiry <= now):
                return None
            props = _props(m.props)
            msg = messages[store_id] = routing.messages.new(m.topic, m.payload, m.qos, retain, props, m.expiry)
        return msg

    by_mosquitto_id = {mosquitto_local_id(b): b for b in bridges}
    bridged: dict[str, list[Any]] = {}  # Siskin's local client id -> [bridge name, its "out" filters, queued]
    counts["bridges"] = bridged
    sessions = []
    for client in db.clients.values():
        interval = client.expiry_interval
        if interval != M.NEVER and client.expiry_time and client.expiry_time <= now:
            left.append(f"session {client.client_id!r}: expired at {client.expiry_time}")
            continue
        settings = by_mosquitto_id.get(client.client_id)
        if settings is not None:
            made = _bridge_session(broker, settings, client, counts)
            if made is None:
                left.append(f"bridge {settings.name}'s session {client.client_id!r}: max_sessions reached")
                continue
            session, filters = made
            bridged[session.client_id] = [settings.name, filters, 0]
            sessions.append((session, client))
            continue
        if interval == 0:
            # Only a bridge's local context is saved so (Mosquitto saves no
            # clean session): a Siskin session with it would end at the start.
            queued = sum(1 for m in client.msgs if m.direction == M.DIRECTION_OUT)
            left.append(
                f"session {client.client_id!r} and its {queued} queued message(s): it ends with its client "
                "(expiry 0), as a Mosquitto bridge's local context: no [[bridge]] of --config takes it "
                f"(a bridge takes local_client_id = {client.client_id!r}, or client_id = "
                f"{client.client_id.removeprefix('local.')!r} without one: convert-mosquitto-conf writes it)"
            )
            continue
        session = broker.sessions.create(client.client_id)
        if session is None:
            left.append(f"session {client.client_id!r}: max_sessions reached")
            continue
        qos2_in = [m.mid for m in client.msgs if m.direction == M.DIRECTION_IN and m.state in INBOUND_UNRELEASED]
        session.restored(
            4 if interval == M.NEVER else 5,  # (v5 sessions carry an interval; 3.1.1's never expire)
            NEVER if interval == M.NEVER else interval,
            client.expiry_time if interval != M.NEVER else 0,
            client.last_mid % 65535 + 1,
            qos2_in,
            client.username,
        )
        persist.session_saved(session)
        counts["sessions"] += 1
        for flt, qos, options, identifier in client.subs:
            sub = broker.add_subscription(session, flt)
            if sub is None:
                left.append(f"subscription {client.client_id!r} {flt!r}: max_subscriptions reached")
                continue
            sub.set_options(qos, bool(options & 4), bool(options & 8), 0, identifier or None)
            persist.sub_saved(session, sub)
            counts["subscriptions"] += 1
        sessions.append((session, client))
    for session, client in sessions:
        bridge = bridged.get(session.client_id)
        for m in client.msgs:
            if bridge is not None and m.direction == M.DIRECTION_OUT:
                msg = message(m.store_id, m.retain)
                if msg is not None and not any(topic_matches(f, msg.topic) for f in bridge[1]):
                    left.append(
                        f"a message on {msg.topic!r} for the upstream of bridge {bridge[0]!r}: no "
                        '"out" rule of its [[bridge]] sends it up'
                    )
                    continue
            if m.direction == M.DIRECTION_IN:
                if m.state in INBOUND_UNRELEASED:
                    devices = [(se, c) for se, c in sessions if se.client_id not in bridged]  # (not back up)
                    _deliver_inbound(message(m.store_id, m.retain), devices, broker, counts)
                continue
            msg = None if m.state in RELEASED_STATES else message(m.store_id, m.retain)
            if msg is None and m.state not in RELEASED_STATES:
                left.append(f"a message for {client.client_id!r}: expired or missing from the file")
                continue
            _deliver(broker, session, msg, m, counts)
            if bridge is not None:
                bridge[2] += 1
    for store_id in db.retained:
        msg = message(store_id, True)
        if msg is None:
            left.append(f"retained message #{store_id}: expired or missing from the file")
            continue
        msg.retain = True
        persist.retained_set(msg)
        counts["retained"] += 1
    return counts


def mosquitto_local_id(settings: Any) -> str:
    """The client id of a Mosquitto bridge's local context, for the [[bridge]] `settings`
    convert-mosquitto-conf made of it: its local_clientid, else "local." + remote_clientid."""
    return settings.local_client_id or "local." + (settings.client_id or "")


def _bridge_session(broker: Any, settings: Any, client: M.Client, counts: dict[str, Any]) -> Any:
    """The local session of Siskin's bridge (common/bridge/bridge.py) as the bridge makes it,
    for Mosquitto's `client` (its local context): owned by bridge:NAME, never expiring,
    subscribed to the bridge's "out" filters; (session, those filters), None: no room."""
    bridge = Bridge(settings, lambda level, text: None, os.urandom)
    session = broker.sessions.create(bridge.local.client_id)
    if session is None:
        return None
    session.restored(5, NEVER, 0, client.last_mid % 65535 + 1, (), "bridge:" + settings.name)
    persist = broker.listener
    persist.session_saved(session)
    counts["sessions"] += 1
    topics = bridge.out_topics()
    for flt, opts in topics:
        sub = broker.add_subscription(session, flt)
        if sub is None:  # (the bridge subscribes at its start all the same)
            continue
        sub.set_options(opts & 3, bool(opts & 4), bool(opts & 8), (opts >> 4) & 3, None)
        persist.sub_saved(session, sub)
        counts["subscriptions"] += 1
    return session, [t[0] for t in topics]


def _deliver(broker: Any, session: Any, msg: Any, m: M.ClientMsg, counts: dict[str, Any]) -> None:
    """One delivery record for `session`, in the state Mosquitto had it."""
    d = broker.routing.deliveries.new(msg, m.qos | (C.PUBLISH_RETAIN if m.retain else 0), _sub_ids(m.props))
    if m.state in SENT_STATES:
        d.set_sent(m.mid)
        counts["inflight"] += 1
    elif m.state in RELEASED_STATES:
        d.set_sent(m.mid)
        d.set_released()
        counts["inflight"] += 1
    else:
        counts["queued"] += 1
    persist = broker.listener
    if m.state in RELEASED_STATES:
        d.seq = persist.next_seq
        persist.next_seq += 1
        persist.delivery_released(session, d)
    else:
        persist.delivery_added(session, d)


def _deliver_inbound(msg: Any, sessions: list[Any], broker: Any, counts: dict[str, Any]) -> None:
    """An inbound QoS 2 message Mosquitto had not released: queued for each imported session
    with a matching subscription (at the lower QoS), as its release would have."""
    if msg is None:
        return
    for session, client in sessions:
        qos = max((q for flt, q, _o, _i in client.subs if topic_matches(flt, msg.topic)), default=-1)
        if qos >= 0:
            m = M.ClientMsg(0, 0, min(qos, msg.qos), M.MS_QUEUED, msg.retain, M.DIRECTION_OUT, b"")
            _deliver(broker, session, msg, m, counts)


def _props(encoded: bytes) -> Any:
    """Mosquitto's encoded v5 properties as the core's list; its Message Expiry goes apart."""
    if not encoded:
        return None
    props, _end = decode_properties(encoded, 0, len(encoded), C.PUBLISH)
    kept = [p for p in props or () if p[0] != C.PROP_MESSAGE_EXPIRY_INTERVAL]
    return kept or None


def _sub_ids(encoded: bytes) -> Any:
    """The Subscription Identifiers of a client message's properties, or None."""
    if not encoded:
        return None
    props, _end = decode_properties(encoded, 0, len(encoded), C.PUBLISH)
    ids = [v for p, v in props or () if p == C.PROP_SUBSCRIPTION_IDENTIFIER]
    return ids or None
