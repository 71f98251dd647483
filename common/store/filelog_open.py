# The opening of a FileLog (filelog.py): find and index its records, set a
# damaged stretch aside, drop a torn tail, rewrite the log after damage, or
# start a new one. filelog.py's theory of operation describes what open
# does; the code is here, apart, because it runs once: a board unloads it
# after start-up (firmware/startup_only.py), so its code does not
# stay in the heap. open_file_log makes and opens a FileLog; this module
# uses its public side only (index, monitor, rewrite, open_append, zeros).

import struct

from common.compat import const
from common.store.filelog import (
    COMPACT_SUFFIX,
    CORRUPT_SUFFIX,
    DAMAGED_SUFFIX,
    FILE_HEADER_SIZE,
    FILE_MAGIC,
    SCAN_STEP,
    FileLog,
    dirname,
)
from common.store.kvrecord import (
    CRC_SIZE,
    ERASED,
    HEADER_SIZE,
    INVALID,
    MAGIC,
    OVERHEAD,
    crc32,
    damage_note,
    damaged_key,
    decode_header,
    is_tombstone,
)

_CHUNK = const(512)  # read size when checking the CRC of a big value
# What _record_at finds at an offset.
_OK = const(0)
_BAD_CRC = const(1)  # a plausible header and length, but the CRC fails
_NOT = const(2)  # no record starts here

_MAGIC_BYTE = bytes([MAGIC])


def open_file_log(fs, path, compact_min=65536, compact_ratio=2, max_bytes=0, keys=0, room=0):
    """A FileLog (its arguments) opened: ready for the Store."""
    log = FileLog(fs, path, compact_min, compact_ratio, max_bytes, keys, room)
    open_log(log)
    return log


def open_log(log):
    """Open the FileLog `log`: scan, set damage aside, rewrite if needed."""
    fs = log.fs
    tmp = log.path + COMPACT_SUFFIX
    if fs.exists(tmp):
        if fs.exists(log.path):
            fs.remove(tmp)  # a compaction that never reached its rename
        else:
            # Only a remove-then-rename adapter (FAT) leaves this: the
            # .compact was synced before the old log was removed.
            fs.rename(tmp, log.path)
    if not fs.exists(log.path):
        _create(log)
        return
    f = fs.open(log.path, "rb")
    try:
        header = f.read(FILE_HEADER_SIZE)
        size = f.seek(0, 2)
        end = size
        if header != FILE_MAGIC:
            good = -1
        else:
            damaged = []
            monitor = log.monitor
            if monitor is not None:
                monitor.progress("scan", 0, size)
            good = _scan(log, f, size, damaged)
            if monitor is not None:
                monitor.progress("scan", size, size)
            if damaged:
                _set_aside(log, f, damaged)
            if good < size:
                end = _data_end(f, good, size)
    finally:
        f.close()
    if good < 0:
        if size > FILE_HEADER_SIZE:
            # Not our log (or its header is damaged): keep it for a human.
            log.skipped += 1
            aside = log.path + CORRUPT_SUFFIX
            n = 0
            while fs.exists(aside):  # never replace an earlier one
                n += 1
                aside = "%s%s.%d" % (log.path, CORRUPT_SUFFIX, n)
            fs.rename(log.path, aside)
            log.notes.append(
                (
                    40,
                    "store: %s has no valid log header (damaged, or not a Siskin store): moved aside to %s "
                    "and started with an empty store; every stored session and retained message is lost"
                    % (log.path, aside),
                )
            )
        _create(log)  # a creation that a power cut interrupted
        return
    log.file_size = size
    if good < end:
        log.torn = end - good
        log.notes.append(
            (
                30,
                "store: dropped a torn tail of %d bytes at the end of %s (a write cut short by a crash)"
                % (log.torn, log.path),
            )
        )
    if good < end or log.skipped or (good < size and not log.room):
        log.file_size = good
        log.rewrite()
    else:
        log.file_size = good
        log.open_append(size)


def _data_end(f, start, size):
    """The offset after the last non-zero byte of f[start:size] (`start`: all zeros)."""
    end = start
    pos = start
    f.seek(pos)
    while pos < size:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        n = len(chunk.rstrip(b"\0"))
        if n:
            end = pos + n
        pos += len(chunk)
    return end


def _record_at(f, off, size):
    """(_OK/_BAD_CRC/_NOT, record size, key, flags) of the record at `off`."""
    f.seek(off)
    head = f.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return _NOT, 0, None, 0
    parsed = decode_header(head, 0)
    if parsed == INVALID or parsed == ERASED:
        return _NOT, 0, None, 0
    flags, klen, vlen = parsed
    rsize = OVERHEAD + klen + vlen
    if off + rsize > size:
        return _NOT, 0, None, 0
    key = f.read(klen)
    crc = crc32(key, crc32(head))
    left = vlen
    while left > 0:
        chunk = f.read(left if left < _CHUNK else _CHUNK)
        if not chunk:
            break
        crc = crc32(chunk, crc)
        left -= len(chunk)
    stored = f.read(CRC_SIZE)
    if left or len(key) != klen or len(stored) != CRC_SIZE:
        return _NOT, 0, None, 0
    if struct.unpack("<I", stored)[0] != crc:
        return _BAD_CRC, rsize, key, flags
    return _OK, rsize, key, flags


def _resync(f, start, size):
    """Offset of the first valid record at or after `start`, or -1."""
    pos = start
    while pos + OVERHEAD <= size:
        f.seek(pos)
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        i = chunk.find(_MAGIC_BYTE)
        while i >= 0:
            if _record_at(f, pos + i, size)[0] == _OK:
                return pos + i
            i = chunk.find(_MAGIC_BYTE, i + 1)
        pos += len(chunk)
    return -1


def _scan(log, f, size, damaged):
    """Index the records; return where the torn tail starts (`size` if none).

    Damaged stretches are appended to `damaged` as (start, end).
    """
    off = FILE_HEADER_SIZE
    index = log.index
    monitor = log.monitor
    report = SCAN_STEP
    while off < size:
        if off >= report and monitor is not None:
            monitor.progress("scan", off, size)
            report = off + SCAN_STEP
        status, rsize, key, flags = _record_at(f, off, size)
        if status != _OK:
            # Trust a bad record's length only if a valid record (or the
            # end of the file) follows it; else look for the next record.
            nxt = off + rsize if status == _BAD_CRC else 0
            if nxt and (nxt == size or _record_at(f, nxt, size)[0] != _OK):
                nxt = 0
            if not nxt:
                nxt = _resync(f, off + 1, size)
            if nxt < 0:
                # Nothing valid after it: a torn tail. A whole record
                # that fails its CRC there is counted as lost too.
                if status == _BAD_CRC:
                    log.skipped += 1
                return off
            log.skipped += 1
            damaged.append((off, nxt))
            off = nxt
            continue
        old = index.get(key)
        if old is not None:
            log.live_bytes -= old[1]
        if is_tombstone(flags):
            if old is not None:
                del index[key]
        else:
            index[key] = (off, rsize)
            log.live_bytes += rsize
        off += rsize
    return off


def _set_aside(log, f, damaged):
    """Append the damaged stretches to path.damaged (synced) before the rewrite drops them."""
    fs = log.fs
    side = log.path + DAMAGED_SUFFIX
    out = fs.open(side, "ab")
    try:
        for start, end in damaged:
            f.seek(start)
            key = damaged_key(f.read(_CHUNK), end - start)
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(left if left < _CHUNK else _CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
            log.notes.append(damage_note(key, start, end, log.path, "kept in " + side))
        fs.sync(out)
    finally:
        out.close()
    fs.sync_dir(dirname(log.path))


def _create(log):
    f = log.fs.open(log.path, "wb")
    f.write(FILE_MAGIC)
    log.zeros(f, log.room)
    log.fs.sync(f)
    f.close()
    log.fs.sync_dir(dirname(log.path))
    log.device_bytes += FILE_HEADER_SIZE + log.room
    log.file_size = FILE_HEADER_SIZE
    log.open_append(FILE_HEADER_SIZE + log.room)
