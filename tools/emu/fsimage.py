"""The littlefs image MicroPython's rp2 port mounts at `/`, made on the host.

MicroPython's rp2 `_boot.py` mounts `rp2.Flash()` (the end of the flash:
MICROPY_HW_FLASH_STORAGE_BYTES of our board folder) as littlefs v2 with 4 KB blocks
and `progsize=256`, and formats it when the mount fails. An image made here
with the same geometry (littlefs-python, PyPI) and written at that offset
is a board whose files were copied before it booted.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.image import storage_bytes

FLASH_BYTES = 2 * 1024 * 1024
BLOCK = 4096


@dataclass(frozen=True)
class FsLayout:
    storage_bytes: int  # MICROPY_HW_FLASH_STORAGE_BYTES of the MicroPython board

    @property
    def offset(self) -> int:
        return FLASH_BYTES - self.storage_bytes

    @property
    def blocks(self) -> int:
        return self.storage_bytes // BLOCK


# image name -> its file system, as our board folder sets it (boards/rp2/*/mpconfigboard.h)
LAYOUTS = {name: FsLayout(storage_bytes(name)) for name in ("rp2040_picow", "rp2040_pico")}


def make_fs_image(layout: FsLayout, files: dict[str, bytes]) -> bytes:
    """A littlefs image holding `files` (path -> content; directories are made)."""
    from littlefs import LittleFS  # (test-emu only: littlefs-python)

    fs = LittleFS(block_size=BLOCK, block_count=layout.blocks, prog_size=256, read_size=32, lookahead_size=32)
    for path in sorted(files):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            try:
                fs.mkdir(d)
            except FileExistsError:
                pass
        with fs.open(path.strip("/"), "wb") as f:
            f.write(files[path])
    return bytes(fs.context.buffer)


def read_fs_files(layout: FsLayout, flash: bytes) -> dict[str, bytes]:
    """Every file of the littlefs at `layout` in a whole-flash image."""
    from littlefs import LittleFS

    image = flash[layout.offset : layout.offset + layout.storage_bytes]
    fs = LittleFS(block_size=BLOCK, block_count=layout.blocks, prog_size=256, read_size=32, mount=False)
    fs.context.buffer = bytearray(image)
    fs.mount()
    out = {}
    for root, _dirs, names in fs.walk("/"):
        for name in names:
            path = (root.rstrip("/") + "/" + name).lstrip("/")
            with fs.open(path, "rb") as f:
                out[path] = f.read()
    return out
