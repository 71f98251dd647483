# Log-structured key-value store on a raw NOR flash partition.
#
# Theory of operation
# -------------------
# The device (esp32.Partition, rp2.Flash, or tests/core/flashsim.py) is a
# circular log of erase blocks ("sectors"). NOR flash only turns bits from 1
# to 0 until a sector is erased back to 0xFF, so nothing is ever overwritten:
# a put appends a record (common/store/kvrecord.py) to the head sector, a delete
# appends a tombstone, and the in-RAM index maps each live key to
# (sector, offset, record size). Values stay on flash; get() reads them.
#
# Sector header (20 bytes, then records back to back):
#
#   offset size field
#   0      4    magic b"SKL1"
#   4      4    erase count of this sector, LE         } part A, written right
#   8      4    CRC-32 of bytes 0..7, LE               } after an erase
#   12     4    sequence number, LE                    } part B, written when the
#   16     4    CRC-32 of bytes 0..15, LE              } sector is opened for appends
#
#   A valid, B valid      -> in the log, ordered by sequence number
#   A valid, B all 0xFF   -> free and erased (ready to open)
#   anything else         -> free, erased again before use (a torn erase or
#                            open, a retired sector, or a fresh device)
#
# Mount reads every header, sorts the log sectors by sequence and scans their
# records oldest first, so a later record of a key wins. Damage never spreads:
# at an invalid record the scan resynchronises on the next offset in the
# sector that holds a valid record (magic, header, CRC), so only the damaged
# record is lost; it is counted in `skipped`, described in `notes` (the
# Store logs them) and its bytes are kept, as far as one record holds them,
# under a key of the DAMAGED_PREFIX namespace (no Store namespace: never
# read as state; --wipe-store removes it). With no valid record after it,
# the rest up to the erased area is a torn tail (an append a power cut cut
# short): dropped, its size in `torn`. A sector with damage or a torn tail
# is never appended to again; the next write opens a fresh sector.
#
# Compaction is FIFO: when a put needs a new sector and only `reserve` free
# sectors remain, the oldest log sector is compacted: its live records (those
# the index still points at) are copied to the head, then part B of its header
# is zeroed (it leaves the log at once), it is erased and part A is written
# with its erase count + 1. A tombstone in the oldest sector is simply dropped:
# nothing older exists that it could still hide. Since every sector goes
# through the same FIFO turn, wear is spread evenly (erase counts differ by at
# most one or two); the counts live in the headers and survive reboots.
#
# Crash consistency: records are written to flash when put() returns (sync is
# a no-op), a torn record fails its CRC and the previous record of the key is
# used, a compaction copy duplicates a value that is still in place, and a
# sector leaves the log (part B zeroed) before its erase begins, so a torn
# erase can never resurrect an old value whose tombstone was dropped.
#
# Limits: a record (12 bytes + key + value) must fit in one sector after the
# header: max_record = block size - 20 (4076 bytes with 4 KiB sectors). Larger
# puts raise ValueError; the board settings keep max_packet_size below it.
# Live data is capped at (sectors - reserve) * (block size - 20); beyond it,
# or when compaction cannot make room, put raises StoreFull.
#
# Write granularity: with prog_size > 1 (rp2: 256) every write is widened to
# whole program units padded with 0xFF, which leaves the bytes around it as
# they are (NOR: writing 1 bits changes nothing). Needs a flash that accepts
# several program operations per page (plain SPI NOR does; flash encryption
# on ESP32 does not).

import struct

from common.compat import const
from common.store.kvrecord import (
    ERASED,
    INVALID,
    MAGIC,
    OVERHEAD,
    StoreFull,
    crc32,
    damage_note,
    damaged_key,
    decode,
    decode_header,
    encode_into,
    is_tombstone,
)

SECTOR_MAGIC = b"SKL1"
SECTOR_HEADER_SIZE = const(20)
PART_B_OFFSET = const(12)
DEFAULT_RESERVE = const(2)
# Keys of the copies of damaged bytes: prefix + sector sequence (u32 LE) + offset (u16 LE).
DAMAGED_PREFIX = b"\x00damaged:"

# Sector states (RAM only).
_LOG = const(0)
_FREE_READY = const(1)  # erased, part A written
_FREE_DIRTY = const(2)  # must be erased before use

# MicroPython block-device ioctl operations.
_IOCTL_BLOCK_COUNT = const(4)
_IOCTL_BLOCK_SIZE = const(5)
_IOCTL_BLOCK_ERASE = const(6)


class KVLog:
    """The persistent-store backend interface over a raw flash block device.

    get / put / delete / keys / sync / close / len, with counters user_bytes,
    device_bytes, skipped (damaged records found), erases, compactions.
    """

    def __init__(self, dev, prog_size=1, reserve=DEFAULT_RESERVE):
        self.dev = dev
        self.nsectors = dev.ioctl(_IOCTL_BLOCK_COUNT, 0)
        self.sector_size = dev.ioctl(_IOCTL_BLOCK_SIZE, 0)
        if self.nsectors < reserve + 2:
            raise ValueError("flash store needs at least %d sectors" % (reserve + 2))
        if self.sector_size < 128 or prog_size < 1 or self.sector_size % prog_size:
            raise ValueError("bad sector or program size")
        self.prog_size = prog_size
        self.reserve = reserve
        # The biggest record that fits in a sector after its header.
        self.max_record = self.sector_size - SECTOR_HEADER_SIZE
        self.capacity = (self.nsectors - reserve) * self.max_record
        self.user_bytes = 0
        self.device_bytes = 0
        self.skipped = 0
        self.torn = 0  # bytes of torn tails dropped at mount
        self.notes = []  # (log level, text): what mount found damaged; the Store logs them
        self.erases = 0
        self.compactions = 0
        self._rbuf = bytearray(self.sector_size)
        self._wbuf = bytearray(self.sector_size + 2 * prog_size)
        self._index = {}
        self.live_bytes = 0
        self._state = [_FREE_DIRTY] * self.nsectors
        self._erase_count = [0] * self.nsectors
        self._log = []  # log sectors, oldest first
        self._seq_max = 0
        self._head_off = -1  # next append offset in the head; -1 = head closed
        self._mount()

    # -- public interface ---------------------------------------------------

    def get(self, key):
        loc = self._index.get(key)
        if loc is None:
            return None
        sector, off, size = loc
        mv = memoryview(self._rbuf)
        self.dev.readblocks(sector, mv[0:size], off)
        rec = decode(self._rbuf, 0, size)
        if rec == INVALID or rec == ERASED or bytes(mv[rec[1] : rec[2]]) != key:
            # Bits rotted since mount: refuse the value rather than return garbage.
            self.skipped += 1
            return None
        return bytes(mv[rec[2] : rec[3]])

    def put(self, key, value):
        size = OVERHEAD + len(key) + len(value)
        if size > self.max_record:
            raise ValueError("record of %d bytes exceeds the flash store limit of %d" % (size, self.max_record))
        old = self._index.get(key)
        if self.live_bytes - (old[2] if old else 0) + size > self.capacity:
            raise StoreFull("flash store full")
        self.user_bytes += len(key) + len(value)
        self._make_room(size)
        old = self._index.get(key)  # compaction may have moved it
        off = self._append_record(key, value, False, size)
        self._index[key] = (self._log[-1], off, size)
        self.live_bytes += size - (old[2] if old else 0)

    def delete(self, key):
        self.user_bytes += len(key)
        old = self._index.get(key)
        if old is None:
            return  # nothing on flash to hide
        size = OVERHEAD + len(key)
        self._make_room(size)
        self._append_record(key, b"", True, size)
        old = self._index.pop(key)
        self.live_bytes -= old[2]

    def keys(self, prefix=b""):
        """The keys starting with `prefix` (a new list)."""
        return [key for key in self._index if key.startswith(prefix)]

    def sync(self):
        # Every put/delete is on flash when it returns (writeblocks is
        # synchronous on esp32 and rp2); there is no cache to flush.
        pass

    def close(self):
        self.sync()
        self._rbuf = None
        self._wbuf = None
        self._index = {}

    def erase_counts(self):
        """Erase count of every sector (persisted in the sector headers)."""
        return list(self._erase_count)

    def __len__(self):
        return len(self._index)

    # -- mount --------------------------------------------------------------

    def _mount(self):
        hbuf = bytearray(SECTOR_HEADER_SIZE)
        unknown = []
        found = []
        max_count = 0
        for s in range(self.nsectors):
            self.dev.readblocks(s, hbuf, 0)
            count = _part_a_count(hbuf)
            if count is None:
                unknown.append(s)
                continue
            self._erase_count[s] = count
            if count > max_count:
                max_count = count
            seq = _part_b_seq(hbuf)
            if seq is not None:
                found.append((seq, s))
                self._state[s] = _LOG
            elif _all_ff(hbuf, PART_B_OFFSET, SECTOR_HEADER_SIZE):
                self._state[s] = _FREE_READY
        # A sector whose count was lost (torn erase, fresh device) is assumed
        # as worn as the most worn one: the FIFO order evens it out anyway.
        for s in unknown:
            self._erase_count[s] = max_count
        self._report_foreign(found)
        found.sort()
        self._log = [s for _, s in found]
        if found:
            self._seq_max = found[-1][0]
        damaged = []
        for s in self._log:
            self._scan_sector(s, s == self._log[-1], damaged)
        # Read every damaged stretch before writing: a put may compact (erase)
        # a sector that holds another one.
        kept = []
        for sector, seq, start, end in damaged:
            kept.append(self._read_damaged(sector, seq, start, end))
        for key, value, what, sector, start, end in kept:
            where = "kept under key %r" % (key,)
            if key not in self._index:
                try:
                    self.put(key, value)
                except OSError as err:  # StoreFull: say so, never stop the mount
                    where = "not kept (%r)" % (err,)
            self.notes.append(damage_note(what, start, end, "flash sector %d" % sector, where))

    def _report_foreign(self, found):
        """Say so when sectors outside the log hold data: never a silent empty start."""
        buf = self._rbuf
        other = 0
        for s in range(self.nsectors):
            if self._state[s] != _FREE_DIRTY:
                continue
            self.dev.readblocks(s, buf, 0)
            if _all_ff(buf, 0, self.sector_size):
                continue  # erased: a fresh device or a completed erase
            other += 1
            # A damaged header over records that still check (a torn erase
            # leaves the header erased or part B zeroed, not this).
            if not _all_ff(buf, 0, PART_B_OFFSET) and not _all_zero(buf, PART_B_OFFSET, SECTOR_HEADER_SIZE):
                rec = decode(buf, SECTOR_HEADER_SIZE, self.sector_size)
                if rec != INVALID and rec != ERASED:
                    self.notes.append(
                        (
                            40,
                            "store: flash sector %d has a damaged header: its records are lost "
                            "(erased when the store needs the sector)" % s,
                        )
                    )
        if other and not found:
            self.notes.append(
                (
                    40,
                    "store: the flash partition holds no Siskin store (%d of %d sectors hold other data: zeros, random "
                    "bytes or damaged headers): started with an empty store; those sectors are erased as it needs them"
                    % (other, self.nsectors),
                )
            )

    def _scan_sector(self, sector, is_head, damaged):
        buf = self._rbuf
        mv = memoryview(buf)
        end = self.sector_size
        self.dev.readblocks(sector, buf, 0)
        seq = _part_b_seq(buf)
        off = SECTOR_HEADER_SIZE
        index = self._index
        clean = True
        while off < end:
            rec = decode(buf, off, end)
            if rec == ERASED and _all_ff(buf, off, end):
                if is_head and clean:
                    self._head_off = off
                break
            if rec == ERASED or rec == INVALID:
                clean = False  # the rest of this sector is never appended to
                nxt = _resync(buf, off + 1, end)
                if nxt < 0:
                    # Nothing valid after it: a torn tail. A whole record
                    # that fails its CRC there is counted as lost too.
                    if _whole_record(buf, off, end):
                        self.skipped += 1
                    last = end
                    while last > off and buf[last - 1] == 0xFF:
                        last -= 1
                    self.torn += last - off
                    self.notes.append(
                        (
                            30,
                            "store: dropped a torn tail of %d bytes in flash sector %d (a write cut short)"
                            % (last - off, sector),
                        )
                    )
                    break
                self.skipped += 1
                damaged.append((sector, seq, off, nxt))
                off = nxt
                continue
            flags, ks, ke, _ve, nxt = rec
            key = bytes(mv[ks:ke])
            old = index.get(key)
            if old is not None:
                self.live_bytes -= old[2]
            if is_tombstone(flags):
                if old is not None:
                    del index[key]
            else:
                index[key] = (sector, off, nxt - off)
                self.live_bytes += nxt - off
            off = nxt

    def _read_damaged(self, sector, seq, start, end):
        """(key for its copy, bytes, key of the record as far as readable, sector, start, end)."""
        mv = memoryview(self._rbuf)
        self.dev.readblocks(sector, mv[0:end], 0)
        what = damaged_key(mv[start:end], end - start)
        key = DAMAGED_PREFIX + struct.pack("<IH", seq, start)
        value = bytes(mv[start : min(end, start + self.max_record - OVERHEAD - len(key))])
        return key, value, what, sector, start, end

    # -- appending ----------------------------------------------------------

    def _free_count(self):
        return self.nsectors - len(self._log)

    def _head_room(self):
        if not self._log or self._head_off < 0:
            return 0
        return self.sector_size - self._head_off

    def _make_room(self, size):
        """Make the head able to take `size` more bytes, compacting as needed."""
        if self._head_room() >= size:
            return
        rounds = 0
        while self._free_count() <= self.reserve:
            if rounds >= len(self._log):
                raise StoreFull("flash store full: compaction cannot make room")
            self._compact_oldest()
            rounds += 1
            if self._head_room() >= size:
                return
        self._open_head()

    def _append_record(self, key, value, tombstone, size):
        """Write one record at the head (room already made); return its offset."""
        off = self._head_off
        lead = off % self.prog_size
        encode_into(self._wbuf, lead, key, value, tombstone)
        self._program(self._log[-1], off, lead, size)
        self._head_off = off + size
        return off

    def _program(self, sector, off, lead, n):
        """Write wbuf[lead:lead+n] at `off`, widened to whole program units."""
        w = self._wbuf
        mv = memoryview(w)
        p = self.prog_size
        if p == 1:
            self.dev.writeblocks(sector, mv[0:n], off)
            self.device_bytes += n
            return
        for i in range(lead):
            w[i] = 0xFF
        total = lead + n
        pad = (-total) % p
        for i in range(total, total + pad):
            w[i] = 0xFF
        total += pad
        self.dev.writeblocks(sector, mv[0:total], off - lead)
        self.device_bytes += total

    def _next_free(self):
        # Circular order after the head, so allocation walks the device.
        start = self._log[-1] + 1 if self._log else 0
        n = self.nsectors
        for i in range(n):
            s = (start + i) % n
            if self._state[s] != _LOG:
                return s
        raise StoreFull("flash store: no free sector")

    def _open_head(self):
        s = self._next_free()
        if self._state[s] != _FREE_READY:
            self._erase(s)
        self._seq_max += 1
        w = self._wbuf
        lead = PART_B_OFFSET % self.prog_size
        # Part B: sequence + CRC over part A and the sequence.
        hdr = bytearray(SECTOR_HEADER_SIZE)
        _pack_part_a(hdr, self._erase_count[s])
        struct.pack_into("<I", hdr, PART_B_OFFSET, self._seq_max)
        struct.pack_into("<I", hdr, 16, crc32(memoryview(hdr)[0:16]))
        w[lead : lead + 8] = hdr[PART_B_OFFSET:SECTOR_HEADER_SIZE]
        self._program(s, PART_B_OFFSET, lead, 8)
        self._state[s] = _LOG
        self._log.append(s)
        self._head_off = SECTOR_HEADER_SIZE

    def _erase(self, s):
        self._state[s] = _FREE_DIRTY
        self.dev.ioctl(_IOCTL_BLOCK_ERASE, s)
        self.erases += 1
        count = self._erase_count[s] + 1
        self._erase_count[s] = count
        _pack_part_a(self._wbuf, count)
        self._program(s, 0, 0, PART_B_OFFSET)
        self._state[s] = _FREE_READY

    # -- compaction ---------------------------------------------------------

    def _compact_oldest(self):
        s = self._log[0]
        if len(self._log) == 1:
            self._open_head()  # never copy a sector into itself
        buf = self._rbuf
        mv = memoryview(buf)
        end = self.sector_size
        self.dev.readblocks(s, buf, 0)
        index = self._index
        off = SECTOR_HEADER_SIZE
        while off < end:
            rec = decode(buf, off, end)
            if rec == ERASED or rec == INVALID:
                break
            flags, ks, ke, _ve, nxt = rec
            size = nxt - off
            if not is_tombstone(flags):  # tombstones here are dropped
                key = bytes(mv[ks:ke])
                loc = index.get(key)
                if loc is not None and loc[0] == s and loc[1] == off:
                    if self._head_room() < size:
                        if self._free_count() == 0:
                            raise StoreFull("flash store: no sector left to compact into")
                        self._open_head()
                    head_off = self._head_off
                    lead = head_off % self.prog_size
                    self._wbuf[lead : lead + size] = mv[off:nxt]
                    self._program(self._log[-1], head_off, lead, size)
                    self._head_off = head_off + size
                    index[key] = (self._log[-1], head_off, size)
            off = nxt
        self._retire(s)
        self.compactions += 1

    def _retire(self, s):
        """Take sector s out of the log, then erase it."""
        lead = PART_B_OFFSET % self.prog_size
        w = self._wbuf
        for i in range(lead, lead + 8):
            w[i] = 0
        # Zeroed part B fails its CRC: s leaves the log before its erase can tear.
        self._program(s, PART_B_OFFSET, lead, 8)
        self._log.remove(s)
        self._erase(s)


def _pack_part_a(buf, count):
    buf[0:4] = SECTOR_MAGIC
    struct.pack_into("<I", buf, 4, count)
    struct.pack_into("<I", buf, 8, crc32(memoryview(buf)[0:8]))


def _part_a_count(hbuf):
    """The erase count from a sector header, or None if part A is not valid."""
    if hbuf[0:4] != SECTOR_MAGIC:
        return None
    count, crc = struct.unpack_from("<II", hbuf, 4)
    if crc32(memoryview(hbuf)[0:8]) != crc:
        return None
    return count


def _part_b_seq(hbuf):
    seq, crc = struct.unpack_from("<II", hbuf, PART_B_OFFSET)
    if crc32(memoryview(hbuf)[0:16]) != crc:
        return None
    return seq


def _resync(buf, start, end):
    """Offset of the first valid record in buf[start:end], or -1."""
    for i in range(start, end - OVERHEAD + 1):
        if buf[i] == MAGIC:
            rec = decode(buf, i, end)
            if rec != INVALID and rec != ERASED:
                return i
    return -1


def _whole_record(buf, off, end):
    """Whether a whole record (that fails its CRC) was written at `off`."""
    if end - off < OVERHEAD:
        return False
    head = decode_header(buf, off)
    if head == INVALID or head == ERASED:
        return False
    stop = off + OVERHEAD + head[1] + head[2]
    # An append cut short leaves its end erased; a whole record was written through.
    return stop <= end and not _all_ff(buf, stop - 4, stop)


def _all_zero(buf, start, end):
    for i in range(start, end):
        if buf[i]:
            return False
    return True


def _all_ff(buf, start, end):
    for i in range(start, end):
        if buf[i] != 0xFF:
            return False
    return True
