# An in-memory file system with the `fs` adapter interface of
# common/store/filelog.py, and power cuts, for the file-store tests on every
# interpreter.
#
# Model (what a journaling POSIX file system promises, and no more):
# - file data is durable once fs.sync(file) returns; data written but not
#   synced survives a power cut only partly: a random prefix of it is kept,
#   and sometimes the file keeps its new length with zeros instead of data
#   (delayed allocation); a write over existing bytes (mode "r+b") makes
#   everything from where it starts unsynced again, so a cut may leave those
#   bytes zero (the zeros of a log's room were never overwritten), torn, or
#   the file shorter (harsher than a real file system: allowed for);
# - names (create, rename, remove) are durable once fs.sync_dir(dir) returns;
#   before that a power cut keeps a random prefix of them, in order (the
#   journal replays whole operations: rename is atomic);
# - cut_after(n): the n-th mutating operation from now (open for writing,
#   write, sync, rename, remove, sync_dir) is the last: a write is torn at a
#   random byte, a name operation is done or not, then PowerCut is raised,
#   the crash model is applied, and every operation (reads too) raises until
#   restore_power(). Handles opened before the cut stay dead.

try:
    from tests.core.flashsim import PowerCut, XorShift
except ImportError:  # run from tests/core directly
    from flashsim import PowerCut, XorShift


class _Inode:
    def __init__(self):
        self.data = bytearray()
        self.durable = 0  # bytes of data known to be on disk


class MemFile:
    def __init__(self, fs, inode, mode):
        self.fs = fs
        self.inode = inode
        self.mode = mode
        self.gen = fs.generation
        self.pos = len(inode.data) if mode == "ab" else 0
        self.closed = False

    def _check(self):
        self.fs._check_power()
        if self.gen != self.fs.generation or self.closed:
            raise OSError(9)  # EBADF

    def read(self, n=-1):
        self._check()
        if self.mode != "rb":
            raise OSError(9)
        data = self.inode.data
        end = len(data) if n is None or n < 0 else min(len(data), self.pos + n)
        out = bytes(data[self.pos : end])
        self.pos = end if end > self.pos else self.pos
        return out

    def readinto(self, buf):
        data = self.read(len(buf))
        buf[0 : len(data)] = data
        return len(data)

    def write(self, buf):
        self._check()
        if self.mode == "rb":
            raise OSError(9)
        data = self.inode.data
        n = len(buf)
        if self.mode == "ab":
            self.pos = len(data)
        elif self.pos < self.inode.durable:
            self.inode.durable = self.pos  # over synced bytes: unsynced again
        torn = self.fs._tearing()
        keep = self.fs.rng.below(n + 1) if torn else n
        end = self.pos + keep
        if end > len(data):
            data.extend(b"\x00" * (end - len(data)))
        data[self.pos : end] = bytes(buf[0:keep])
        self.pos = end
        if torn:
            self.fs._crash()
        self.fs.bytes_written += n
        return n

    def seek(self, pos, whence=0):
        self._check()
        if whence == 1:
            pos += self.pos
        elif whence == 2:
            pos += len(self.inode.data)
        self.pos = pos
        return pos

    def tell(self):
        self._check()
        return self.pos

    def flush(self):
        self._check()

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


class MemFS:
    def __init__(self, seed=1):
        self.names = {}  # path -> _Inode, as the running system sees it
        self.durable_names = {}  # as the disk has it
        self.pending = []  # name operations since the last sync_dir
        self.rng = XorShift(seed)
        self.ops = 0
        self.bytes_written = 0
        self.syncs = 0
        self.generation = 0
        self._cut_at = 0
        self.dead = False

    # -- fault injection ----------------------------------------------------

    def cut_after(self, n, seed=None):
        self._cut_at = self.ops + n
        if seed is not None:
            self.rng = XorShift(seed)

    def restore_power(self):
        self.dead = False
        self._cut_at = 0

    def _check_power(self):
        if self.dead:
            raise PowerCut("file system is unpowered")

    def _tearing(self):
        self._check_power()
        self.ops += 1
        return self._cut_at and self.ops == self._cut_at

    def _crash(self):
        """Apply the crash model, then raise PowerCut."""
        rng = self.rng
        # Names: the durable ones plus an in-order prefix of the pending ones.
        names = dict(self.durable_names)
        for op in self.pending[: rng.below(len(self.pending) + 1)]:
            _apply(names, op)
        seen = []
        for inode in list(names.values()) + list(self.names.values()):
            if inode in seen:
                continue
            seen.append(inode)
            unsynced = len(inode.data) - inode.durable
            if unsynced > 0:
                keep = rng.below(unsynced + 1)
                if rng.below(4) == 0:  # new length kept, contents zero
                    for i in range(inode.durable + keep, len(inode.data)):
                        inode.data[i] = 0
                else:  # (MicroPython's bytearray has no slice deletion)
                    inode.data = inode.data[: inode.durable + keep]
            inode.durable = len(inode.data)
        self.names = names
        self.durable_names = dict(names)
        self.pending = []
        self.generation += 1
        self.dead = True
        raise PowerCut("power cut")

    def _name_op(self, op):
        torn = self._tearing()
        if torn and self.rng.below(2):
            self._crash()  # not done
        _apply(self.names, op)
        self.pending.append(op)
        if torn:
            self._crash()  # done, perhaps not durable

    # -- the fs adapter interface -------------------------------------------

    def open(self, path, mode):
        self._check_power()
        if mode == "rb":
            inode = self.names.get(path)
            if inode is None:
                raise OSError(2)  # ENOENT
            return MemFile(self, inode, mode)
        if mode == "wb" or (mode == "ab" and path not in self.names):
            self._name_op(("bind", path, _Inode()))
        elif mode == "r+b":
            if path not in self.names:
                raise OSError(2)
        elif mode != "ab":
            raise ValueError("mode " + mode)
        return MemFile(self, self.names[path], mode)

    def sync(self, f):
        f._check()
        if self._tearing():
            if self.rng.below(2):
                f.inode.durable = len(f.inode.data)
            self._crash()
        f.inode.durable = len(f.inode.data)
        self.syncs += 1

    def rename(self, src, dst):
        self._check_power()
        if src not in self.names:
            raise OSError(2)
        self._name_op(("rename", src, dst))

    def remove(self, path):
        self._check_power()
        if path not in self.names:
            raise OSError(2)
        self._name_op(("unbind", path))

    def exists(self, path):
        self._check_power()
        return path in self.names

    def sync_dir(self, path):
        if self._tearing():
            if self.rng.below(2):
                self.durable_names = dict(self.names)
                self.pending = []
            self._crash()
        self.durable_names = dict(self.names)
        self.pending = []

    # -- test helpers -------------------------------------------------------

    def size(self, path):
        return len(self.names[path].data)

    def truncate(self, path, size):
        inode = self.names[path]
        inode.data = inode.data[:size]
        inode.durable = min(inode.durable, size)

    def corrupt(self, path, offset, xor=0x01):
        self.names[path].data[offset] ^= xor


def _apply(names, op):
    kind = op[0]
    if kind == "bind":
        names[op[1]] = op[2]
    elif kind == "rename":
        if op[1] in names:
            names[op[2]] = names.pop(op[1])
    elif kind == "unbind":
        names.pop(op[1], None)
