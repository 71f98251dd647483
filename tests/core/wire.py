# A sans-I/O MQTT client (common/client/client.py) joined by hand to a
# connection of a harness broker (tests/core/harness.py): the client's
# output goes into the broker, the broker's into the client, every byte
# through the codec. Runs on CPython and MicroPython.


class Recorder:
    """A client's handler that writes down every event."""

    def __init__(self):
        self.events = []
        self.messages = []
        self.auto_ack = None  # a Client: ack every message at once

    def on_connected(self, present):
        self.events.append(("connected", present))

    def on_refused(self, reason):
        self.events.append(("refused", reason))

    def on_message(self, pkt):
        self.messages.append(pkt)
        if self.auto_ack is not None and pkt.qos:
            self.auto_ack.ack(pkt.packet_id)

    def on_delivered(self, token, reason):
        self.events.append(("delivered", token, reason))

    def on_suback(self, pid, reasons):
        self.events.append(("suback", list(reasons)))

    def on_closed(self, why):
        self.events.append(("closed", why))

    def delivered(self):
        return [e[1:] for e in self.events if e[0] == "delivered"]


class Wire:
    """One connection of harness `h`'s broker, with `client` at the other end."""

    def __init__(self, h, client, peer=None):
        self.h = h
        self.client = client
        self.closed = False
        self.sent = []  # every chunk the client wrote, raw
        self.cid = h.broker.connection_made(h.now, None, peer)
        h.clients[self.cid] = self

    def ms(self):
        return self.h.now * 1000

    def receive(self, data):
        # Called inside the harness's pump: the client's answers wait for settle().
        self.client.data_received(data, self.ms())

    def settle(self, rounds=50):
        """Move bytes until neither side has more (bounded)."""
        h = self.h
        for _ in range(rounds):
            h.pump()
            out = self.client.take_output()
            if not out:
                return
            self.sent.append(out)
            if not self.closed:
                h.broker.data_received(self.cid, out, h.now)
        raise AssertionError("the client and the broker never settle")

    def drop(self):
        """The network breaks: both ends see it; bytes in transit are lost."""
        self.client.take_output()
        if not self.closed:
            self.closed = True
            self.h.broker.connection_lost(self.cid, self.h.now)
            self.h.pump()
        self.client.connection_lost()
