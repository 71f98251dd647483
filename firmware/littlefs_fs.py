# The MicroPython `fs` adapter for common/store/filelog.py: a file on the board's
# littlefs (the fallback store when no raw flash partition is given to
# common/store/kvlog.py).
#
# littlefs is copy-on-write: a file's new data becomes durable when the file
# is synced (MicroPython's flush calls lfs_file_sync), and a rename or remove
# is one atomic metadata commit, durable when it returns. So `sync` is a
# flush and `sync_dir` has nothing to do.

import os


class LittleFS:
    def open(self, path, mode):
        if mode not in ("rb", "ab", "wb"):
            raise ValueError("unsupported mode " + mode)
        return open(path, mode)

    def sync(self, f):
        f.flush()

    def rename(self, src, dst):
        try:
            os.rename(src, dst)  # littlefs replaces dst atomically
        except OSError:
            # A VFS that refuses to rename over a file (FAT): remove, then
            # rename. src is complete and synced by then, and FileLog adopts
            # a lone path + ".compact" at open, so a cut in between loses
            # nothing.
            os.remove(dst)
            os.rename(src, dst)

    def remove(self, path):
        os.remove(path)

    def exists(self, path):
        try:
            os.stat(path)
            return True
        except OSError:
            return False

    def sync_dir(self, path):
        pass
