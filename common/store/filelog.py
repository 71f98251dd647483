# Log-structured key-value store in one append-only file.
#
# Theory of operation
# -------------------
# The host backend (POSIX files through cpython_host/runtime/posix_fs.py) and the
# board fallback when no raw flash partition is used (a littlefs file through
# firmware/littlefs_fs.py). All I/O goes through the `fs` adapter handed in:
#
#   fs.open(path, mode)   modes "rb", "ab", "wb" ("r+b" with room, below);
#                         file objects with read/write/seek/tell/flush/close
#   fs.sync(file)         data durable (host: flush + fsync; board: flush)
#   fs.rename(src, dst)   atomic replace
#   fs.remove(path), fs.exists(path)
#   fs.sync_dir(dir)      names in dir durable (host: fsync dir; board: no-op)
#
# File layout: the 8-byte file header b"SKVLOG1\n", then records back to back
# in the framing of common/store/kvrecord.py (header, key, value, CRC-32). A delete
# appends a tombstone. The in-RAM index maps key -> (offset, record size);
# get() reads the record back and checks its CRC.
#
# Open scans the file: a later record of a key wins. Damage never spreads:
# where a record does not check (bad header or CRC), the scan resynchronises
# on the next offset that holds a valid record (magic, header, length inside
# the file, CRC), so only the damaged record is lost; its bytes are appended
# to path + ".damaged" for a human, counted in `skipped` and described in
# `notes`. When no valid record follows, the rest is a torn tail (a write a
# crash or power cut cut short): dropped, its size in `torn` and `notes`.
# If anything was skipped or cut off, the log is rewritten at once (as a
# compaction), so later appends never land behind garbage the next open
# would stop at. A file without our header is renamed to path + ".corrupt"
# (or ".corrupt.N" if that is taken) and a new log begins, said in `notes`
# at error level. The Store logs `notes` when it opens (common/store/store.py).
# (The code of the open is filelog_open.py: it runs once, and a board
# unloads it after start-up.)
#
# Compaction, when the file is at least `compact_ratio` times the live bytes
# and at least `compact_min` bytes: the live records are written to
# path + ".compact", which is synced, renamed over the log, and the directory
# synced. A crash before the rename leaves the old log (the leftover
# .compact is removed at the next open); after it, the complete new one.
# Tombstones are not copied: the new file holds nothing older they could hide.
#
# Monitor (optional, the shell's, set before open_log): monitor.progress(
# "scan", bytes read, file size) as the open reads the log (at its start,
# every SCAN_STEP bytes and at its end), so the shell can say what long work
# is going on. (The host hears of each compaction too, through a subclass
# of its own that wraps rewrite(): cpython_host/runtime/storage.py; a board has no
# monitor, and keeps no code for one.)
#
# Durability: sync() flushes and syncs the file; what was put before it
# survives a power cut, what came after may be lost, whole records only.
#
# Batching: small records are encoded into one buffer of `batch` bytes and
# written with one call when it is full, at a sync and before a read (the
# file object's own write costs about 1 us per call on PyPy, twice per
# message with a persistent subscriber). A failed write is as an append's:
# the records it held may be lost, counted by the Store, and the log is
# rewritten before the next append (_tail_dirty).
#
# Room (the host: `room` > 0): the file is kept `room` bytes of zeros longer
# than the log, written and synced ahead of time, and records are written
# over them in place (mode "r+b"). A sync then flushes data into blocks the
# file already has: no size or block-map change for the file system to
# journal: on ext4 a journal commit saved per sync (measured up to 2.5 x
# faster; no gain where the device's own cache flush dominates). When the zeros run out, `room` more are written (that
# sync pays for the size change once). At open, a tail of zeros after the
# last record is free room, not a torn tail; a torn record in it (non-zero
# bytes that are no record) is dropped as any torn tail. The magic byte is
# never 0, so zeros never look like a record. Room is not counted in
# max_bytes. Compaction writes the new file with its room.

import struct

from common.compat import const
from common.store.kvrecord import (
    ERASED,
    HEADER_FORMAT,
    HEADER_SIZE,
    INVALID,
    MAGIC,
    OVERHEAD,
    StoreFull,
    crc32,
    decode,
    encode_into,
)

FILE_MAGIC = b"SKVLOG1\n"
FILE_HEADER_SIZE = 8
COMPACT_SUFFIX = ".compact"
CORRUPT_SUFFIX = ".corrupt"
DAMAGED_SUFFIX = ".damaged"
_SMALL = const(512)  # records up to this size are encoded in one buffer, one write
SCAN_STEP = const(1 << 20)  # bytes of log read between two progress reports of the open


def dirname(path):
    i = path.rfind("/")
    if i < 0:
        return "."
    if i == 0:
        return "/"
    return path[:i]


def _presize(index, n):
    """Make room for `n` keys in the dict `index` now. MicroPython grows a
    dict only when it is full, into one new table 1.5 times as big, which
    needs that much contiguous heap; on a board serving clients for a while
    the free heap is in pieces (measured with tools/ram_serve on the 32-bit
    unix port, ESP32 settings: 195 KB free, no free block above 1 KB, and the
    index's growth failed). Made at start-up, while the heap is whole, the
    table stays: deleting keys does not shrink it."""
    for i in range(n):
        index[i] = None
    for i in range(n):
        del index[i]


class FileLog:
    """The persistent-store backend interface over an append-only file."""

    # Bytes of small records gathered for one write (see Batching above;
    # at least _SMALL). The host's subclass gathers more.
    batch = _SMALL

    def __init__(self, fs, path, compact_min=65536, compact_ratio=2, max_bytes=0, keys=0, room=0):
        """`keys`: room made in the RAM index for this many keys at once (a
        board: see _presize); 0 = it grows as keys come. `room`: zeros kept
        written ahead of the log (the host: see Room above); 0 = none."""
        self.fs = fs
        self.monitor = None  # see Monitor above; set before open_log to hear of its scan
        self.path = path
        self.compact_min = compact_min
        self.compact_ratio = compact_ratio
        self.max_bytes = max_bytes  # 0 = no limit but the file system's
        self.room = room  # zeros kept ahead of the log (see Room above)
        self.allocated = 0  # with room: the file's size, zeros included
        self.user_bytes = 0
        self.device_bytes = 0
        self.skipped = 0
        self.torn = 0  # bytes of torn tail dropped at open
        self.notes = []  # (log level, text): what open found damaged; the Store logs them
        self.compactions = 0
        self.live_bytes = 0  # bytes of live records (without the file header)
        self.file_size = 0
        self.index = {}
        self._af = None  # append handle
        self._rf = None  # read handle, reopened after appends
        self._rf_stale = True
        self._unsynced = False
        self._tail_dirty = False  # a write failed part way: rewrite first
        self._buf = bytearray(max(self.batch, _SMALL))  # records not yet written
        self._view = memoryview(self._buf)  # (never resized)
        self._held = 0  # bytes of them in _buf
        _presize(self.index, keys)
        # Not opened yet: filelog_open.open_log (open_file_log) scans the
        # file, once, at start-up.

    # -- public interface ---------------------------------------------------

    def get(self, key):
        loc = self.index.get(key)
        if loc is None:
            return None
        data = self._read_record(loc[0], loc[1])
        if data is None:
            return None
        rec = decode(data, 0, len(data))
        if rec == INVALID or rec == ERASED or data[rec[1] : rec[2]] != key:
            self.skipped += 1  # damaged since it was written
            return None
        return data[rec[2] : rec[3]]

    def put(self, key, value):
        self._append(key, value, False)

    def delete(self, key):
        if key not in self.index:
            self.user_bytes += len(key)
            return
        self._append(key, b"", True)

    def keys(self, prefix=b""):
        """The keys starting with `prefix`, in file order (reading their values
        in this order is sequential on the medium)."""
        index = self.index
        found = []
        for key in index:
            if key.startswith(prefix):
                found.append(key)
        found.sort(key=lambda k: index[k][0])
        return found

    def sync(self):
        if self._unsynced and self._af is not None:
            self._write_held()
            self.fs.sync(self._af)
            self._unsynced = False

    def close(self):
        if self._af is not None:
            self.sync()
            self._af.close()
            self._af = None
        if self._rf is not None:
            self._rf.close()
            self._rf = None

    def __len__(self):
        return len(self.index)

    # -- what open_log (filelog_open.py) uses too --------------------------------

    def open_append(self, size):
        """The append handle, at the end of the log; `size`: the file's."""
        if self.room:
            self._af = self.fs.open(self.path, "r+b")
            self._af.seek(self.file_size)
            self.allocated = size
        else:
            self._af = self.fs.open(self.path, "ab")

    def zeros(self, f, n):
        """Write n zero bytes at f's position (room ahead of the log)."""
        if n <= 0:
            return
        block = bytes(min(n, 65536))
        while n > 0:
            f.write(block if n >= len(block) else block[:n])
            n -= len(block)

    # -- appending ----------------------------------------------------------

    def _append(self, key, value, tombstone):
        klen = len(key)
        vlen = len(value)
        size = OVERHEAD + klen + vlen
        self.user_bytes += klen + vlen
        if self._tail_dirty:
            self.rewrite()
        if self.max_bytes and self.file_size + size > self.max_bytes:
            # The old record of the key stays live until the new one is written.
            if not tombstone and FILE_HEADER_SIZE + self.live_bytes + size > self.max_bytes:
                raise StoreFull("file store full")
            self.rewrite()
            if self.file_size + size > self.max_bytes and not tombstone:
                raise StoreFull("file store full")
        old = self.index.get(key)
        off = self.file_size
        af = self._af
        try:
            if self.room and off + size > self.allocated:
                # Out of room: more zeros, then back to the end of the log.
                self._write_held()
                af.seek(self.allocated)
                grow = off + size + self.room - self.allocated
                self.zeros(af, grow)
                self.device_bytes += grow
                self.allocated += grow
                af.seek(off)
            if size <= _SMALL:
                held = self._held
                if held + size > len(self._buf):
                    self._write_held()
                    held = 0
                encode_into(self._buf, held, key, value, tombstone)
                self._held = held + size
            else:
                self._write_held()
                head = bytearray(HEADER_SIZE)
                struct.pack_into(HEADER_FORMAT, head, 0, MAGIC, 1 if tombstone else 0, klen, vlen)
                crc = crc32(value, crc32(key, crc32(head)))
                af.write(head)
                af.write(key)
                af.write(value)
                af.write(struct.pack("<I", crc))
        except OSError as e:
            # Part of the record may be in the file: never append behind it.
            self._tail_dirty = True
            if e.args and e.args[0] == 28:
                raise StoreFull("file system full")
            raise
        self.file_size = off + size
        self.device_bytes += size
        self._unsynced = True
        self._rf_stale = True
        if old is not None:
            self.live_bytes -= old[1]
        if tombstone:
            del self.index[key]
        else:
            self.index[key] = (off, size)
            self.live_bytes += size
        if self.file_size >= self.compact_min and self.file_size >= self.compact_ratio * (FILE_HEADER_SIZE + self.live_bytes):
            self.rewrite()

    def _write_held(self):
        # The records gathered in _buf to the file (its buffer: a sync or a
        # read flushes that). A failure is raised as _append's would be.
        held = self._held
        if held:
            self._held = 0
            try:
                self._af.write(self._view[0:held])
            except OSError:
                self._tail_dirty = True  # (part of them may be in the file)
                raise

    def _read_record(self, off, size):
        if self._rf_stale or self._rf is None:
            if self._af is not None:
                self._write_held()
                self._af.flush()  # so a second handle sees the appends
            if self._rf is not None:
                self._rf.close()
            self._rf = self.fs.open(self.path, "rb")
            self._rf_stale = False
        rf = self._rf
        rf.seek(off)
        data = rf.read(size)
        if len(data) != size:
            self.skipped += 1
            return None
        return data

    def rewrite(self):
        """Compaction: live records to path.compact, sync, rename over the log."""
        fs = self.fs
        if self._tail_dirty:
            self._held = 0  # (behind a failed write: lost with it)
        tmp = self.path + COMPACT_SUFFIX
        keys = self.keys()  # in file order
        out = fs.open(tmp, "wb")
        new_index = {}
        pos = FILE_HEADER_SIZE
        try:
            out.write(FILE_MAGIC)
            for key in keys:
                off, size = self.index[key]
                data = self._read_record(off, size)
                if data is None:
                    continue
                rec = decode(data, 0, size)
                if rec == INVALID or rec == ERASED:
                    self.skipped += 1
                    continue
                out.write(data)
                new_index[key] = (pos, size)
                pos += size
            self._held = 0  # (the live ones were read, so written, first: _read_record)
            self.zeros(out, self.room)
            fs.sync(out)
        finally:
            out.close()
        for f in (self._af, self._rf):
            if f is not None:
                f.close()
        self._af = None
        self._rf = None
        fs.rename(tmp, self.path)
        fs.sync_dir(dirname(self.path))
        self.device_bytes += pos + self.room
        self.compactions += 1
        self.index = new_index
        self.live_bytes = pos - FILE_HEADER_SIZE
        self.file_size = pos
        self._tail_dirty = False
        self._unsynced = False
        self._rf_stale = True
        self.open_append(pos + self.room)
