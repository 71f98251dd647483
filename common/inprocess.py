# The driver's handle (common/driver.py) for a peer inside the process: the
# bridge's local connection, an MQTT-SN client's session. Nothing is
# buffered, so pending() is 0, and every way of closing is one end: the
# subclass's _ended(). A subclass gives write, pause_reading, resume_reading
# and _ended.


class InProcessHandle:
    def half_close(self):
        self._ended()

    def close(self):
        self._ended()

    def abort(self):
        self._ended()

    def pending(self):
        return 0
