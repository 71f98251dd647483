"""Stateful property tests of the whole broker (CPython only, hypothesis).

A RuleBasedStateMachine drives several in-memory clients on one sans-I/O
Broker (tests/core/harness.py) with arbitrary sequences of what clients do:
CONNECT at 3.1.1 or 5 with random options (clean or persistent session,
will with delay, Receive Maximum, Topic Alias Maximum, Session Expiry),
SUBSCRIBE / UNSUBSCRIBE with random filters (wildcards, `$share/`, `$`
topics, invalid ones), PUBLISH at QoS 0/1/2 (retained, with topic aliases and
Message Expiry), acks owed or made up, PINGREQ, DISCONNECT (with or without
the will), dropped connections, paused output, time passing, and arbitrary
bytes once a CONNECT was accepted. The settings are small (harness
FUZZ_SETTINGS) so that every limit is reached.

Checked after every step:
- no exception escapes the core (every call into the Broker is direct, not
  through the driver, which would contain one);
- every byte the broker writes decodes at the client's protocol level, and
  an outbound topic alias is set before it is used;
- the broker never has more unacknowledged QoS 1/2 PUBLISHes out to a
  connection than max_inflight and the client's Receive Maximum allow, nor
  reuses a packet id still in flight;
- no PUBLISH reaches a client whose session never held a matching
  subscription (a model keeps, per session, every filter its connections
  sent in a SUBSCRIBE, including the ones hidden in arbitrary bytes, which a
  shadow FrameReader decodes as the broker does; a new session — CONNACK
  session present 0 — starts an empty set);
- the bytes of all queues (max_queued_total_bytes' count) are the sum of
  every session's queue, and within that budget;
and at the end of each run, once every client has left and every session
expired, every pool is back at its baseline (Harness.held(): connections,
sessions, subscriptions, trie entries, shared groups, messages beyond the
retained ones, deliveries).

`make test` runs a short version; `make fuzz` (SISKIN_FUZZ_EXAMPLES) a long one.
"""

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from common.broker.outbox import QUEUED_COST
from common.broker.topics import parse_shared, topic_matches
from common.mqtt import consts as C
from common.mqtt.codec import FrameReader
from common.mqtt.errors import MqttError
from common.mqtt.packets import Disconnect, PubAck, Publish, Subscribe, Unsubscribe, decode_packet
from tests.core.harness import FUZZ_SETTINGS, Client, Harness

pytestmark = [
    pytest.mark.hypothesis,
    # While it shrinks a failure, hypothesis compares bytes with ints in its
    # own cache, which -bb turns into an error that hides the failure.
    pytest.mark.filterwarnings("ignore::BytesWarning:hypothesis.internal.cache"),
]

EXAMPLES = int(os.environ.get("SISKIN_FUZZ_EXAMPLES", "0"))
MAX_CLIENTS = 6
CLIENT_IDS = ("a", "b", "c", "d")

# A small vocabulary, so that filters and topics meet often; now and then a
# `$` topic, an invalid one or any text (one draw in WEIRD: hypothesis favours
# the ends of a range, so the odd ones sit in the middle).
PLAIN_TOPICS = ["a", "b", "a/a", "a/b", "b/a", "b/b"]
PLAIN_FILTERS = ["a", "b", "+", "#", "a/a", "a/b", "a/+", "a/#", "+/a", "+/+", "+/#", "b/#"]
WEIRD = 12
plain_topics = st.sampled_from(PLAIN_TOPICS)


def _sometimes(common, odd):
    return st.integers(0, 2 * WEIRD).flatmap(lambda k: odd if k == WEIRD else common)


topics = _sometimes(plain_topics, st.sampled_from(["$SYS/x", "$x/a", "a/+", "#", "", "a//b"]) | st.text(max_size=6))
filters = _sometimes(
    st.sampled_from(PLAIN_FILTERS + ["$share/g/" + f for f in PLAIN_FILTERS[:6]] + ["$x/#"]),
    st.sampled_from(["$SYS/#", "$share/g", "$share//a", "a#", "+a", "", "a/#/b"]) | st.text(max_size=6),
)
payloads = st.binary(max_size=24)
pids = st.integers(1, 5)


class ModelClient(Client):
    """A harness client that checks every PUBLISH it receives against its session's filters."""

    def __init__(self, machine, level, client_id):
        Client.__init__(self, machine.h, level)
        self.m = machine
        self.client_id = client_id
        self.filters = set()  # the session's filters, shared with the connections of the same session
        self.accepted = False
        self.shadow = None  # what the broker reads from us after CONNECT, decoded as it does
        self.aliases = {}  # outbound topic aliases the broker set
        self.owed = []  # acks we owe the broker: (packet type, packet id)
        self.window = 0  # the most unacknowledged QoS 1/2 PUBLISHes the broker may send us
        self.qos2_ids = set()  # ids of the broker's QoS 2 PUBLISHes to us, until PUBCOMP
        # Ids we sent a PUBACK/PUBREC for while we owed none: a PUBLISH the
        # broker sent that we have not read yet (our output paused) may be
        # settled by it, so its arrival owes nothing.
        self.early = set()

    def send_raw(self, data):
        if self.shadow is not None:
            self._shadow(data)
        Client.send_raw(self, data)

    def _shadow(self, data):
        reader = self.shadow
        try:
            reader.feed(data)
            while True:
                frame = reader.maybe_read_frame()
                if frame is None:
                    return
                pkt = decode_packet(frame[0], reader.buf, frame[1], frame[2], self.level)
                ptype = pkt.ptype
                if ptype == C.SUBSCRIBE:
                    for flt, _ in pkt.topics:
                        self.filters.add(flt)
                elif C.PUBACK <= ptype <= C.PUBCOMP:
                    # Settled, or (a made-up ack) maybe settled: forget what we owe
                    # for that id, which only ever weakens the checks below.
                    pid = pkt.packet_id
                    ours = ptype == C.PUBREL
                    if (ptype == C.PUBACK or ptype == C.PUBREC) and (ptype, pid) not in self.owed:
                        self.early.add(pid)
                    self.owed = [o for o in self.owed if o[1] != pid or (o[0] == C.PUBREL) != ours]
                    if ptype == C.PUBACK or ptype == C.PUBCOMP:
                        self.qos2_ids.discard(pid)
        except MqttError:
            self.shadow = None  # the broker closes the connection at the same frame

    def receive(self, data):
        Client.receive(self, data)
        for pkt in self.take():
            ptype = pkt.ptype
            if ptype == C.CONNACK:
                self._connack(pkt)
            elif ptype == C.PUBLISH:
                self._publish(pkt)
            elif ptype == C.PUBREC:
                self.owed.append((C.PUBREL, pkt.packet_id))
            elif ptype == C.PUBREL:
                self.owed.append((C.PUBCOMP, pkt.packet_id))

    def _connack(self, pkt):
        if pkt.reason != 0:
            return
        sessions = self.m.sessions
        if pkt.session_present:
            assert self.client_id in sessions, f"session present for {self.client_id!r}, which never had one"
            self.filters = sessions[self.client_id]
        else:
            sessions[self.client_id] = self.filters
        self.accepted = True
        self.shadow = FrameReader(self.m.h.broker.settings.max_packet_size)

    def _publish(self, pkt):
        topic = pkt.topic
        alias = self._prop(pkt, C.PROP_TOPIC_ALIAS)
        if alias is not None:
            if topic:
                self.aliases[alias] = topic
            else:
                assert alias in self.aliases, f"topic alias {alias} used before it was set"
                topic = self.aliases[alias]
        for flt in self.filters:
            inner = parse_shared(flt)[1]
            if inner is not None and topic_matches(inner, topic):
                break
        else:
            raise AssertionError(
                f"connection {self.cid} (session {self.client_id!r}) received {topic!r}"
                f" without a matching subscription: {sorted(self.filters)!r}"
            )
        if pkt.qos:
            # (A PUBCOMP owed for a made-up PUBREC holds no id.)
            busy = {o[1] for o in self.owed if o[0] == C.PUBACK or o[0] == C.PUBREC} | self.qos2_ids
            # [MQTT-2.3.1-4] [MQTT-2.2.1-4] a new PUBLISH takes an id not in use; the window is
            # max_inflight, and a v5 client's Receive Maximum [MQTT-3.3.4-9].
            assert pkt.packet_id not in busy, f"packet id {pkt.packet_id} reused while in flight: {self.owed}"
            # DUP resends of a resumed session too [MQTT-4.4.0-1]: no more
            # than the window, even one the client lowered on reconnecting.
            assert len(busy) < self.window, f"more than {self.window} unacknowledged PUBLISHes: {busy}"
            if pkt.packet_id in self.early:
                self.early.discard(pkt.packet_id)  # settled before we read it
                return
            self.owed.append((C.PUBACK if pkt.qos == 1 else C.PUBREC, pkt.packet_id))
            if pkt.qos == 2:
                self.qos2_ids.add(pkt.packet_id)

    @staticmethod
    def _prop(pkt, pid):
        for p in pkt.props or ():
            if p[0] == pid:
                return p[1]
        return None


class BrokerMachine(RuleBasedStateMachine):
    @initialize(
        overrides=st.fixed_dictionaries(
            {},
            optional={
                "max_inflight": st.integers(1, 3),
                "max_queued_messages": st.integers(0, 4),
                "max_queued_total_bytes": st.integers(0, 3000),
                "queue_full": st.sampled_from(["drop_newest", "drop_oldest", "refuse"]),
                "max_messages": st.integers(4, 40),
                "max_connections": st.integers(2, 6),
                "max_sessions": st.integers(2, 6),
                "max_subscriptions": st.integers(2, 12),
                "max_out_buffer": st.integers(0, 400),
                "queue_qos0_offline": st.booleans(),
                "match_cache_bytes": st.sampled_from([0, 200, 65536]),
                "shared_subscriptions": st.booleans(),
                "maximum_qos": st.integers(0, 2),
            },
        )
    )
    def start(self, overrides):
        values = dict(FUZZ_SETTINGS)
        values.update(overrides)
        self.h = Harness(**values)
        self.sessions = {}  # client id -> filter set of its current session
        self.conns = []

    @invariant()
    def queued_total_is_every_queue_within_its_budget(self):
        h = getattr(self, "h", None)
        if h is None:
            return
        b = h.broker
        total = 0
        for session in b.sessions.by_client_id.values():
            total += session.queued_bytes + session.queue.count * QUEUED_COST
        assert b.routing.queued_total == total, (b.routing.queued_total, total)
        assert total <= b.settings.max_queued_total_bytes, total

    def _live(self):
        return [c for c in self.conns if not c.closed]

    def _pick(self, i, accepted=True):
        live = [c for c in self.conns if not c.closed and (c.accepted or not accepted)]
        return live[i % len(live)] if live else None

    def _aim(self, k, topic):
        # A topic that one of the filters sent so far matches (deliveries are
        # rare with random topics alone), else `topic`.
        known = sorted({f for fs in self.sessions.values() for f in fs})
        if not known:
            return topic
        inner = parse_shared(known[k % len(known)])[1]
        if inner is None:
            return topic
        return inner.replace("+", "b").replace("#", "a")

    # ------------------------------------------------------------ connections

    @precondition(lambda self: len(self._live()) < MAX_CLIENTS)
    @rule(
        level=st.sampled_from([4, 5]),
        client_id=st.sampled_from(CLIENT_IDS),
        clean=st.booleans(),
        keep_alive=st.sampled_from([0, 0, 0, 2]),  # mostly none: time passes in big steps
        will=st.none() | st.tuples(plain_topics, payloads, st.integers(0, 2), st.booleans(), st.integers(0, 30)),
        expiry=st.none() | st.integers(0, 100),
        receive_max=st.none() | st.integers(1, 3),
        alias_max=st.none() | st.integers(0, 2),
    )
    def connect(self, level, client_id, clean, keep_alive, will, expiry, receive_max, alias_max):
        props = None
        if level == 5:
            props = []
            if expiry is not None:
                props.append((C.PROP_SESSION_EXPIRY_INTERVAL, expiry))
            if receive_max is not None:
                props.append((C.PROP_RECEIVE_MAXIMUM, receive_max))
            if alias_max is not None:
                props.append((C.PROP_TOPIC_ALIAS_MAXIMUM, alias_max))
        if will is not None:
            wprops = [(C.PROP_WILL_DELAY_INTERVAL, will[4])] if level == 5 and will[4] else None
            will = (will[0], will[1], will[2], will[3], wprops)
        c = ModelClient(self, level, client_id)
        c.window = self.h.broker.settings.max_inflight
        if level == 5 and receive_max is not None and receive_max < c.window:
            c.window = receive_max
        if c.closed:
            return  # refused at accept (beyond max_connections and its refusal slots)
        self.h.clients[c.cid] = c
        self.conns.append(c)
        c.connect(client_id, clean=clean, keep_alive=keep_alive, will=will, props=props)

    @precondition(lambda self: self._live())
    @rule(i=st.integers(0, MAX_CLIENTS))
    def drop(self, i):
        self._pick(i, accepted=False).drop()

    @precondition(lambda self: self._live())
    @rule(i=st.integers(0, MAX_CLIENTS), paused=st.booleans())
    def pause(self, i, paused):
        c = self._pick(i, accepted=False)
        self.h.broker.output.set_paused(c.cid, paused)
        self.h.pump()

    @rule(seconds=st.integers(1, 40))
    def advance(self, seconds):
        self.h.advance(seconds)

    # ---------------------------------------------------------------- packets

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(
        i=st.integers(0, MAX_CLIENTS),
        topics_=st.lists(st.tuples(filters, st.integers(0, 2)), min_size=1, max_size=2),
        options=st.integers(0, 0x2C),
        sub_id=st.integers(0, 3),
        pid=pids,
    )
    def subscribe(self, i, topics_, options, sub_id, pid):
        c = self._pick(i)
        props = None
        if c.level == 5:
            options &= 0x2C  # No Local, Retain As Published, Retain Handling (3 is refused)
            props = [(C.PROP_SUBSCRIPTION_IDENTIFIER, sub_id)] if sub_id else None
        else:
            options = 0
        c.send(Subscribe(pid, [(f, q | options) for f, q in topics_], props))

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(i=st.integers(0, MAX_CLIENTS), flts=st.lists(filters, min_size=1, max_size=2), pid=pids)
    def unsubscribe(self, i, flts, pid):
        self._pick(i).send(Unsubscribe(pid, flts, None))

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(
        i=st.integers(0, MAX_CLIENTS),
        topic=topics,
        aimed=st.none() | st.integers(0, 63),
        payload=payloads,
        qos=st.integers(0, 2),
        retain=st.booleans(),
        dup=st.booleans(),
        pid=pids,
        alias=st.sampled_from([None, None, None, 1, 2, 3]),
        expiry=st.none() | st.integers(0, 20),
    )
    def publish(self, i, topic, aimed, payload, qos, retain, dup, pid, alias, expiry):
        c = self._pick(i)
        if aimed is not None:
            topic = self._aim(aimed, topic)
        props = None
        if c.level == 5:
            props = []
            if alias is not None:
                props.append((C.PROP_TOPIC_ALIAS, alias))
            if expiry is not None:
                props.append((C.PROP_MESSAGE_EXPIRY_INTERVAL, expiry))
        c.send(Publish(topic, payload, qos, retain, dup and qos > 0, pid if qos else 0, props))

    @precondition(lambda self: any(c.accepted and c.owed for c in self._live()))
    @rule(i=st.integers(0, MAX_CLIENTS), n=st.integers(1, 8))
    def ack(self, i, n):
        c = self._pick(i)
        owed, c.owed = c.owed[:n], c.owed[n:]
        for ptype, pid in owed:
            if c.closed:
                return
            c.send(PubAck(ptype, pid, 0, None))

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(i=st.integers(0, MAX_CLIENTS), ptype=st.sampled_from([C.PUBACK, C.PUBREC, C.PUBREL, C.PUBCOMP]), pid=pids)
    def stray_ack(self, i, ptype, pid):
        self._pick(i).send(PubAck(ptype, pid, 0, None))

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(i=st.integers(0, MAX_CLIENTS))
    def ping(self, i):
        c = self._pick(i)
        c.send_raw(b"\xc0\x00")

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(i=st.integers(0, MAX_CLIENTS), with_will=st.booleans(), expiry=st.none() | st.integers(0, 50))
    def disconnect(self, i, with_will, expiry):
        c = self._pick(i)
        props = [(C.PROP_SESSION_EXPIRY_INTERVAL, expiry)] if c.level == 5 and expiry is not None else None
        c.send(Disconnect(C.RC_DISCONNECT_WITH_WILL if with_will and c.level == 5 else 0, props))

    @precondition(lambda self: any(c.accepted for c in self._live()))
    @rule(i=st.integers(0, MAX_CLIENTS), data=st.binary(min_size=1, max_size=64))
    def raw(self, i, data):
        self._pick(i).send_raw(data)

    # ------------------------------------------------------------- the end

    def teardown(self):
        h = getattr(self, "h", None)
        if h is None:
            return
        for c in self.conns:
            if not c.closed:
                h.broker.output.set_paused(c.cid, False)
                c.drop()
        # Will delays, then session expiries (both at most FUZZ_SETTINGS'
        # max_session_expiry), then what they left a second later.
        h.advance(FUZZ_SETTINGS["max_session_expiry"] + 3)
        held = h.held()
        assert not any(held.values()), f"after every client left and every session expired: {held!r}"


BrokerMachine.TestCase.settings = settings(
    max_examples=max(200, EXAMPLES // 10),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestBroker = BrokerMachine.TestCase
