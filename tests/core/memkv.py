# An in-memory store backend for the persistence tests: the interface of
# common/store/filelog.py and common/store/kvlog.py (get, put, delete, keys, sync,
# close, len), with a power cut that keeps exactly what was synced.


class MemKV:
    def __init__(self, durable=None):
        self.durable = dict(durable) if durable else {}  # what survives a power cut
        self.data = dict(self.durable)
        self.syncs = 0
        self.user_bytes = 0
        self.device_bytes = 0
        self.skipped = 0
        self.notes = []

    def get(self, key):
        return self.data.get(key)

    def put(self, key, value):
        self.data[bytes(key)] = bytes(value)
        self.user_bytes += len(key) + len(value)

    def delete(self, key):
        self.data.pop(bytes(key), None)

    def keys(self, prefix=b""):
        n = len(prefix)
        return [k for k in self.data if k[:n] == prefix]

    def __len__(self):
        return len(self.data)

    def sync(self):
        self.durable = dict(self.data)
        self.syncs += 1

    def close(self):
        self.sync()

    def power_cut(self):
        """A new backend holding what a restart would find: the synced state."""
        return MemKV(self.durable)
