# The bridge's two MQTT clients' event handlers (common/client/client.py
# calls on_connected, on_message, ... of its handler): each hands the event
# to the Bridge's method for that side. Methods on small objects, no
# closures (a closure per handler would cost a board heap per bridge).


class LocalSide:
    """The handler of the `local` client (methods, no closures)."""

    def __init__(self, bridge):
        self.b = bridge

    def on_connected(self, present):
        self.b._local_connected(present)

    def on_refused(self, reason):
        self.b._local_failed("the local broker refused the bridge's session (0x%02x)" % reason)

    def on_message(self, pkt):
        self.b._outbound(pkt)

    def on_delivered(self, token, reason):
        self.b._stored_locally(token, reason)

    def on_completed(self, token):
        pass  # (the local client does not hold its PUBRELs)

    def on_release(self, pid):
        self.b._local_release(pid)

    def on_suback(self, pid, reasons):
        self.b._local_suback(pid, reasons)

    def on_closed(self, why):
        self.b._local_failed(why)


class UpSide:
    """The handler of the `up` client (methods, no closures)."""

    def __init__(self, bridge):
        self.b = bridge

    def on_connected(self, present):
        self.b._up_connected(present)

    def on_refused(self, reason):
        self.b._up_refused(reason)

    def on_preamble(self):
        self.b._births_first(True)

    def on_message(self, pkt):
        self.b._inbound(pkt)

    def on_delivered(self, token, reason):
        self.b._delivered_up(token, reason)

    def on_completed(self, token):
        self.b._completed_up(token)

    def on_release(self, pid):
        pass  # (the upstream client answers PUBREL itself)

    def on_suback(self, pid, reasons):
        self.b._suback("upstream", reasons)

    def on_closed(self, why):
        self.b.close_wanted = why
