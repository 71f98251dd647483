# The gateway as its own Sparkplug B edge node (sparkplug_group set):
# docs/sparkplug.md.
#
# Theory of operation. The driver (common/driver.py) holds one EdgeNode when
# the setting is on (this module is not loaded without it) and calls tick()
# at its deadline (wants()) and death() as the broker shuts down. An NCMD to
# spBv1.0/<group>/NCMD/<node> whose "Node Control/Rebirth" is true (the ACL
# decides who may send one) makes the next tick a new NBIRTH
# (Sparkplug.rebirth, set by sparkplug.py as the NCMD is routed). The first tick
# publishes the NBIRTH on spBv1.0/<group>/NBIRTH/<node> (QoS 0, not
# retained; seq 0; bdSeq, Node Control/Rebirth and every metric with its
# name, alias and data type); each later one an NDATA (seq + 1, mod 256)
# of the metrics that changed since the last report, by alias only, or
# nothing if none did. death() publishes the NDEATH (QoS 1; bdSeq, the
# same as the birth's). These go through the broker like its $SYS
# messages (Broker.publish): to local subscribers and to the bridges whose
# rules forward them. With sparkplug_aware on, the NBIRTH is also its own
# certificate under $sparkplug/certificates/.
#
# bdSeq is the store's boot counter mod 256 (it grows by one at each start
# with a store: a host application tells this run's NDEATH from an older
# one's); 0 without a store. The metrics are the $SYS figures an operator
# watches (METRICS; sys_topics.snapshot), the store's health when there is
# one, and the shell's heap figure when it gives one (a board's allocated
# heap, the host's resident set). Timestamps are the shell's wall clock
# (Broker.wall_ms); without one the Payload has none.

from common.broker.limits import ConfigError
from common.broker.protobuf import BOOLEAN, INT64, UINT64, add_metric, add_seq, payload_start
from common.broker.sparkplug import CERTIFICATES, REBIRTH
from common.broker.sys_topics import DROP_COUNTERS, snapshot

# (metric name, snapshot key), aliases 1.. in this order; "dropped" is the
# sum of DROP_COUNTERS, as $SYS/broker/messages/dropped.
METRICS = (
    ("Clients/Connected", "connected"),
    ("Clients/Sessions", "sessions"),
    ("Messages/Received", "messages_received"),
    ("Messages/Sent", "messages_sent"),
    ("Messages/Dropped", "dropped"),
    ("Messages/Held", "messages"),
    ("Queues/Bytes", "queued_total"),
    ("Retained/Count", "retained"),
    ("Store/Skipped Records", "store_skipped"),
    ("Store/Write Errors", "store_errors"),
    ("Heap/Bytes", "heap"),
)
# After METRICS (aliases on in this order): a board's free heap, then each
# running bridge's backlog ("Bridges/<name>/Queued", the bridges' order).
HEAP_FREE = "Heap/Free Bytes"
BD_SEQ = "bdSeq"


def _valid_id(name):
    # A Sparkplug id: not empty, none of / + # (spec 4.1.1).
    return name and name.find("/") < 0 and name.find("+") < 0 and name.find("#") < 0


class EdgeNode:
    def __init__(self, broker, settings):
        group = settings.sparkplug_group
        node = settings.sparkplug_node
        if not (_valid_id(group) and _valid_id(node)):
            raise ConfigError(
                "sparkplug_group = %r, sparkplug_node = %r: wants two Sparkplug ids (not empty, no / + #)" % (group, node)
            )
        base = "spBv1.0/" + group + "/"
        self.birth_topic = base + "NBIRTH/" + node
        self.data_topic = base + "NDATA/" + node
        self.death_topic = base + "NDEATH/" + node
        self.interval = settings.sparkplug_interval
        health = broker.listener.store_health()
        self.bd_seq = 0 if health is None else health[0] & 0xFF
        self.seq = 0
        self.last = None  # the values reported last, in alias order (None: born not yet)
        self.bridges = []  # the bridges' names in the birth (another set: a new birth)
        self.due = 0  # s: the next report (0: now)

    def wants(self, broker, now):
        """Whether tick() has something to do: a report due, a rebirth asked for."""
        return now >= self.due or broker.sparkplug.rebirth

    def tick(self, broker, now, heap, free=None, bridges=()):
        """The NBIRTH the first time, when an NCMD asked for a rebirth and
        when the bridges running changed (their metrics are new), else an
        NDATA if one is due. `free`: a board's free heap (None: not
        measured); `bridges`: [(name, messages queued)] of those running."""
        spb = broker.sparkplug
        if now >= self.due:
            self.due = now + self.interval if self.interval else 1 << 29
        elif not spb.rebirth:
            return
        values = self.values(broker, heap)
        values.append(free)
        names = []
        for name, queued in bridges:
            names.append(name)
            values.append(queued)
        if self.last is None or spb.rebirth or names != self.bridges:
            spb.rebirth = False
            self.bridges = names
            self.birth(broker, now, values)
            return
        out = None
        last = self.last
        for i in range(len(values)):
            if values[i] != last[i] and values[i] is not None:
                if out is None:
                    out = payload_start(self._ms(broker))
                add_metric(out, None, i + 1, UINT64, values[i])
        self.last = values
        if out is not None:
            self.seq = (self.seq + 1) & 0xFF
            add_seq(out, self.seq)
            broker.publish(self.data_topic, bytes(out), 0, False, now)

    def birth(self, broker, now, values):
        """The NBIRTH: every metric named, with its alias; seq 0."""
        out = payload_start(self._ms(broker))
        add_metric(out, BD_SEQ, 0, INT64, self.bd_seq)
        add_metric(out, REBIRTH, 0, BOOLEAN, False)
        n = len(METRICS)
        for i in range(len(values)):
            if values[i] is not None:
                name = METRICS[i][0] if i < n else HEAP_FREE if i == n else "Bridges/" + self.bridges[i - n - 1] + "/Queued"
                add_metric(out, name, i + 1, UINT64, values[i])
        self.seq = 0
        add_seq(out, 0)
        payload = bytes(out)
        self.last = values
        broker.publish(self.birth_topic, payload, 0, False, now)
        if broker.sparkplug.aware:
            broker.publish(CERTIFICATES + self.birth_topic, payload, 0, True, now)

    def death(self, broker, now):
        """The NDEATH (the broker shuts down): bdSeq as the birth's, no seq."""
        if self.last is None:
            return  # never born
        out = payload_start(self._ms(broker))
        add_metric(out, BD_SEQ, 0, INT64, self.bd_seq)
        broker.publish(self.death_topic, bytes(out), 1, False, now)
        self.last = None

    def values(self, broker, heap):
        """The metrics' values now, in METRICS order (None: not measured here)."""
        snap = snapshot(broker)
        dropped = 0
        for _name, key in DROP_COUNTERS:
            dropped += snap[key]
        snap["dropped"] = dropped
        health = broker.listener.store_health()
        snap["store_skipped"] = None if health is None else health[1]
        snap["store_errors"] = None if health is None else health[2]
        snap["heap"] = heap
        return [snap[key] for _name, key in METRICS]

    def _ms(self, broker):
        return None if broker.wall_ms is None else broker.wall_ms()
