# A simulated NOR flash partition with the MicroPython block-device protocol
# of esp32.Partition and rp2.Flash (extended interface), for the flash store
# tests on every interpreter.
#
# NOR semantics: erase sets a whole block to 0xFF; a write can only clear
# bits (the result is old AND new); writeblocks with an offset never erases.
#
# Fault injection: cut_after(n) makes the n-th write or erase from now the
# torn one: a write programs only a prefix of its bytes (the byte at the tear
# half-programmed), an erase leaves the block partly erased (a prefix or a
# suffix set to 0xFF, or random bits set to 1 all over the block). That operation then
# raises PowerCut, and so does every later operation (reads included) until
# restore_power(). The torn shape comes from a small deterministic PRNG, so a
# failing cut point replays exactly.


class PowerCut(Exception):
    pass


class XorShift:
    """Deterministic 32-bit xorshift PRNG (no `random` module needed)."""

    def __init__(self, seed):
        self.state = (seed * 2654435761 + 1) & 0xFFFFFFFF or 1

    def next(self):
        x = self.state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.state = x
        return x

    def below(self, n):
        return self.next() % n if n > 0 else 0


class FlashSim:
    def __init__(self, nblocks=16, block_size=4096, prog_size=1, seed=1):
        self.nblocks = nblocks
        self.block_size = block_size
        self.prog_size = prog_size  # writes must be aligned to it (rp2: 256)
        self.mem = bytearray(b"\xff" * (nblocks * block_size))
        self.erase_counts = [0] * nblocks
        self.ops = 0  # writes + erases performed (torn one included)
        self.writes = 0
        self.bytes_written = 0
        self.rng = XorShift(seed)
        self._cut_at = 0  # ops count at which to tear; 0 = never
        self._tear_block = None
        self.dead = False

    # -- fault injection ----------------------------------------------------

    def cut_after(self, n, seed=None):
        """The n-th write/erase from now (1 = the next one) is torn."""
        self._cut_at = self.ops + n
        if seed is not None:
            self.rng = XorShift(seed)

    def tear_erase_of(self, block, keep):
        """The next erase of `block` stops after erasing all but its first
        `keep` bytes, then the power fails (the worst case for a store that
        trusts a sector header it finds intact)."""
        self._tear_block = (block, keep)

    def restore_power(self):
        self.dead = False
        self._cut_at = 0

    def _check_power(self):
        if self.dead:
            raise PowerCut("flash is unpowered")

    def _tearing(self):
        self._check_power()
        self.ops += 1
        return self._cut_at and self.ops == self._cut_at

    # -- block-device protocol ----------------------------------------------

    def readblocks(self, block_num, buf, offset=0):
        self._check_power()
        start = block_num * self.block_size + offset
        n = len(buf)
        if start < 0 or start + n > len(self.mem):
            raise OSError(22)
        buf[0:n] = self.mem[start : start + n]

    def writeblocks(self, block_num, buf, offset=None):
        if offset is None:  # the basic interface: erase, then write whole blocks
            nblk = len(buf) // self.block_size
            for i in range(nblk):
                self.ioctl(6, block_num + i)
            offset = 0
        start = block_num * self.block_size + offset
        n = len(buf)
        if start < 0 or start + n > len(self.mem):
            raise OSError(22)
        if start % self.prog_size or n % self.prog_size:
            raise OSError(22)  # unaligned program on a paged flash
        torn = self._tearing()
        limit = n
        if torn:
            limit = self.rng.below(n + 1)
        mem = self.mem
        if limit:
            # old AND new, byte for byte, via one big-int AND (fast on both VMs)
            old = int.from_bytes(mem[start : start + limit], "big")
            new = int.from_bytes(bytes(buf[0:limit]), "big")
            mem[start : start + limit] = (old & new).to_bytes(limit, "big")
        if torn:
            if limit < n:  # the byte at the tear: some of its bits programmed
                mem[start + limit] &= buf[limit] | (self.rng.next() & 0xFF)
            self.dead = True
            raise PowerCut("power cut during write")
        self.writes += 1
        self.bytes_written += n

    def ioctl(self, op, arg):
        if op == 4:
            return self.nblocks
        if op == 5:
            return self.block_size
        if op == 6:
            torn = self._tearing()
            start = arg * self.block_size
            end = start + self.block_size
            self.erase_counts[arg] += 1
            if self._tear_block is not None and self._tear_block[0] == arg:
                keep = self._tear_block[1]
                self._tear_block = None
                self.mem[start + keep : end] = b"\xff" * (self.block_size - keep)
                self.dead = True
                raise PowerCut("power cut during erase")
            if torn:
                mem = self.mem
                mode = self.rng.below(3)
                if mode == 0:  # a prefix erased
                    cut = start + self.rng.below(self.block_size)
                    for i in range(start, cut):
                        mem[i] = 0xFF
                elif mode == 1:  # a suffix erased: the header still there
                    cut = start + self.rng.below(self.block_size)
                    for i in range(cut, end):
                        mem[i] = 0xFF
                else:  # bits set to 1 at random all over the block
                    for _ in range(self.rng.below(self.block_size) + 1):
                        i = start + self.rng.below(self.block_size)
                        mem[i] |= self.rng.next() & 0xFF
                self.dead = True
                raise PowerCut("power cut during erase")
            self.mem[start:end] = b"\xff" * self.block_size
            return 0
        if op in (1, 2, 3):  # init, shutdown, sync
            return 0
        return None
