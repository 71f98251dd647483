# Births first: a bridge's record of the Sparkplug B births it sent up, so
# that whenever it starts sending on an upstream connection (its CONNACK,
# or the primary host coming online) each edge node's NBIRTH and then its
# DBIRTHs go up again before anything else of that node (docs/sparkplug.md).
#
# A birth is recorded when it goes up, in queue order, not when it is
# published here: the births replayed are the ones in force for the next
# queued DATA of their node. A newer birth still queued behind older DATA
# comes later in the same order, so no DATA is ever read with the aliases
# of a birth newer than its own.
#
# Bounded by `bound` births kept (NBIRTHs + DBIRTHs; each holds its
# payload): a birth over it is not kept (counted in `unkept`, logged), so
# its node gets no replay. NDEATH forgets a node, DDEATH a device: a dead
# node is not announced alive again. A DBIRTH of a node whose NBIRTH is not
# kept is not kept either (it means nothing without it).

SPB = "spBv1.0/"


class Births:
    def __init__(self, bound, log, name):
        self.bound = bound
        self.log = log
        self.name = name  # the bridge's (for the log)
        # [[node "G/E", NBIRTH, [[device, DBIRTH], ...]], ...] in order of
        # their first NBIRTH; a birth: (remote topic, payload, retain, props).
        self.nodes = []
        self.kept = 0
        self.unkept = 0

    def _node(self, key):
        for node in self.nodes:
            if node[0] == key:
                return node
        return None

    def went_up(self, topic, remote, payload, retain, props):
        """A message went up (`topic` here, `remote` upstream): a birth is
        kept, a death forgets."""
        if not topic.startswith(SPB):
            return
        parts = topic.split("/")
        if len(parts) < 4 or parts[1] == "STATE":
            return
        kind = parts[2]
        key = parts[1] + "/" + parts[3]
        node = self._node(key)
        if kind == "NBIRTH":
            if node is not None:  # a new birth of the node: its devices are born again after it
                self.kept -= len(node[2])
                node[1] = (remote, payload, retain, props)
                node[2] = []
            elif self._room(topic):
                self.nodes.append([key, (remote, payload, retain, props), []])
                self.kept += 1
        elif kind == "NDEATH":
            if node is not None:
                self.nodes.remove(node)
                self.kept -= 1 + len(node[2])
        elif len(parts) == 5 and node is not None:
            device = parts[4]
            devices = node[2]
            for d in devices:
                if d[0] == device:
                    if kind == "DBIRTH":
                        d[1] = (remote, payload, retain, props)
                    elif kind == "DDEATH":
                        devices.remove(d)
                        self.kept -= 1
                    return
            if kind == "DBIRTH" and self._room(topic):
                devices.append([device, (remote, payload, retain, props)])
                self.kept += 1

    def _room(self, topic):
        if self.kept < self.bound:
            return True
        self.unkept += 1
        n = self.unkept
        if n <= 10 or n % 1000 == 0:
            self.log(
                30,
                "bridge %s: birth %s not kept (%d so far): sparkplug_births = %d are; its node's births are not "
                "sent again on a reconnect" % (self.name, topic, n, self.bound),
            )
        return False

    def replay(self, up):
        """Every kept birth up again, in order (each node: NBIRTH, then its
        DBIRTHs), at QoS 0 as Sparkplug sends births; `up` is connected.
        How many were written."""
        n = 0
        for node in self.nodes:
            for birth in [node[1]] + [d[1] for d in node[2]]:
                if up.publish(birth[0], birth[1], 0, birth[2], birth[3]):
                    n += 1
        return n
