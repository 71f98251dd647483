"""A MicroPython firmware image with Siskin frozen in: `tools/build --image`.

    make firmware BOARD=rp2040_picow MICROPY_DIR=~/src/micropython PICOTOOL_DIR=~/src/picotool-install
    make firmware BOARD=unix32 MICROPY_DIR=~/src/micropython
    python -m tools.build --image --board rp2040_picow --micropython DIR [--pico-sdk DIR] [--picotool DIR]

Theory of operation
-------------------
The MicroPython sources are not part of this repository: the developer
points at a checkout of the pinned release (MICROPY_VERSION below, with the
submodules its port needs) and this module runs MicroPython's own build with
firmware/manifest.py as the frozen manifest, in build/<board>/ of this
repository (MicroPython's tree is only read, apart from its mpy-cross,
which its build makes in place). Everything missing (the checkout, a
submodule, the version, a compiler, picotool) stops the build before it
starts, with what to install or set.

- rp2040_picow, rp2040_pico: ports/rp2 through CMake with a board folder
  of this repository (boards/rp2/SISKIN_PICO_W, SISKIN_PICO: MicroPython's
  RPI_PICO_W and RPI_PICO with lwIP's PPP on, network.PPP), the pico-sdk of
  the checkout (or PICO_SDK_PATH) and a picotool built from source
  (PICOTOOL_DIR: pico-sdk 2.x needs it to write the .uf2 and would
  otherwise download and build it). Result: dist/<board>/siskin-<version>.uf2,
  with the heap size and the flash left read from the ELF's symbols.
- unix32: ports/unix with MICROPY_FORCE_32BIT=1 (4-byte words and 31-bit
  small ints, as on the boards), the "standard" variant's frozen set
  (asyncio, ssl) plus Siskin, mbedTLS on, libffi and btree off (their 32-bit
  libraries are not needed). Result: dist/unix32/micropython, which runs the
  firmware with a board's heap (`-X heapsize=`) and is what `make test-boards`
  and `tools/ram_budget.py --port unix --micropython dist/unix32/micropython` use
  (that build has Siskin frozen in: `ram_budget`'s "code" row needs a plain
  32-bit build without FROZEN_MANIFEST).
- esp32 needs ESP-IDF: docs/boards.md has the recipe (untested on hardware).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MANIFEST = REPO_ROOT / "firmware" / "manifest.py"
# The rp2 images' fixes of MicroPython 1.28's lwIP under network.PPP: a user
# C module whose functions replace others through the linker's --wrap.
LWIP_PPP = REPO_ROOT / "boards" / "rp2" / "lwip_ppp" / "micropython.cmake"
# The release the images are built from and tested with (docs/boards.md).
MICROPY_VERSION = (1, 28, 0)
GET_MICROPY = (
    "git clone --branch v1.28.0 https://github.com/micropython/micropython; "
    "cd micropython && make -C ports/{port} submodules{board_arg}"
)


@dataclass(frozen=True)
class Image:
    port: str
    board: str  # MicroPython's board (rp2) or variant (unix) ours is made from
    libs: tuple[str, ...]  # submodules of the checkout the build needs (lib/<name>)
    tools: tuple[str, ...]  # commands the build needs, with the Debian package that has each
    board_dir: str = ""  # our board folder (rp2), relative to this repository

    def board_folder(self) -> Path:
        return REPO_ROOT / self.board_dir


# lib/<name> -> a file that is there once the submodule is checked out.
LIB_MARKERS = {
    "pico-sdk": "pico_sdk_init.cmake",
    "tinyusb": "src/tusb.h",
    "cyw43-driver": "src/cyw43.h",
    "lwip": "src/include/lwip/opt.h",
    "mbedtls": "library/ssl_tls.c",
    "btstack": "src/btstack.h",
    "micropython-lib": "README.md",
}
TOOL_PACKAGES = {
    "make": "make",
    "cmake": "cmake",
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "gcc": "gcc gcc-multilib",
}
RP2_TOOLS = ("make", "cmake", "arm-none-eabi-gcc")
IMAGES = {
    "rp2040_picow": Image(
        "rp2",
        "RPI_PICO_W",
        ("pico-sdk", "tinyusb", "cyw43-driver", "lwip", "mbedtls", "btstack", "micropython-lib"),
        RP2_TOOLS,
        "boards/rp2/SISKIN_PICO_W",
    ),
    # The plain Pico: the same RP2040 without the CYW43; its only network is
    # PPP over a UART (a modem gateway; make test-emu serves clients over it).
    "rp2040_pico": Image(
        "rp2", "RPI_PICO", ("pico-sdk", "tinyusb", "lwip", "mbedtls", "micropython-lib"), RP2_TOOLS, "boards/rp2/SISKIN_PICO"
    ),
    "unix32": Image("unix", "standard", ("mbedtls", "micropython-lib"), ("make", "gcc")),
}


def fail(message: str) -> SystemExit:
    return SystemExit("build --image: " + message)


def micropython_version(root: Path) -> tuple[int, int, int]:
    text = (root / "py" / "mpconfig.h").read_text()
    parts = [re.search(rf"#define MICROPY_VERSION_{k} \(?(\d+)", text) for k in ("MAJOR", "MINOR", "MICRO")]
    if not all(parts):
        raise fail(f"{root}/py/mpconfig.h has no MICROPY_VERSION_MAJOR/MINOR/MICRO")
    major, minor, micro = (int(m.group(1)) for m in parts if m)
    return major, minor, micro


def check_sources(name: str, micropy: str | None, pico_sdk: str | None) -> Path:
    """The MicroPython checkout, after checking everything the build of `name` needs."""
    image = IMAGES[name]
    want = ".".join(map(str, MICROPY_VERSION))
    how = GET_MICROPY.format(port=image.port, board_arg=f" BOARD={image.board}" if image.port == "rp2" else "")
    if not micropy:
        raise fail(f"MICROPY_DIR is not set: point it at a MicroPython v{want} checkout ({how})")
    root = Path(micropy).expanduser().resolve()
    if not (root / "py" / "mpconfig.h").is_file() or not (root / "ports" / image.port).is_dir():
        raise fail(f"MICROPY_DIR={root} is not a MicroPython checkout (no py/mpconfig.h or ports/{image.port})")
    found = ".".join(map(str, micropython_version(root)))
    if found != want:
        raise fail(f"MICROPY_DIR={root} is MicroPython {found}; Siskin's images are built from v{want} ({how})")
    for lib in image.libs:
        base = Path(pico_sdk).expanduser().resolve() if lib == "pico-sdk" and pico_sdk else root / "lib" / lib
        if not (base / LIB_MARKERS[lib]).is_file():
            where = "PICO_SDK_PATH" if lib == "pico-sdk" and pico_sdk else f"submodule lib/{lib}"
            raise fail(f"{where} is missing or empty ({base}): {how}")
    for tool in image.tools:
        if shutil.which(tool) is None:
            raise fail(f"{tool} not found (Debian: apt-get install {TOOL_PACKAGES[tool]})")
    return root


def picotool_config_dir(picotool: str | None) -> Path:
    """The directory holding picotoolConfig.cmake, under PICOTOOL_DIR."""
    hint = (
        "build picotool 2.2.0 from source (github.com/raspberrypi/picotool, tag 2.2.0: "
        "cmake -S picotool -B build -DPICO_SDK_PATH=$MICROPY_DIR/lib/pico-sdk "
        "-DCMAKE_INSTALL_PREFIX=$HOME/picotool && make -C build install; Debian: libusb-1.0-0-dev pkg-config) "
        "and set PICOTOOL_DIR to its install prefix"
    )
    if not picotool:
        raise fail("PICOTOOL_DIR is not set: pico-sdk 2.x needs picotool to write the .uf2; " + hint)
    base = Path(picotool).expanduser().resolve()
    configs = sorted(base.rglob("picotoolConfig.cmake")) + sorted(base.rglob("picotool-config.cmake"))
    if not configs:
        raise fail(f"PICOTOOL_DIR={base} holds no picotoolConfig.cmake; " + hint)
    return configs[0].parent


def run(cmd: list[str], log: Path) -> None:
    """Run one build step, its output to `log`; on failure show its tail."""
    print("build --image: " + " ".join(cmd), flush=True)
    with log.open("a") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    if proc.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-40:])
        raise fail(f"{cmd[0]} failed (exit {proc.returncode}); the last lines of {log}:\n{tail}")


def elf_symbols(elf: Path) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            symbols[parts[2]] = int(parts[0], 16)
    return symbols


def lwip_ppp_wraps() -> list[str]:
    """The functions boards/rp2/lwip_ppp/ replaces (its --wrap options)."""
    return re.findall(r"--wrap=(\w+)", LWIP_PPP.read_text())


def storage_bytes(name: str) -> int:
    """MICROPY_HW_FLASH_STORAGE_BYTES of our board folder for image `name`:
    the file system at the end of the flash."""
    header = IMAGES[name].board_folder() / "mpconfigboard.h"
    found = re.search(r"#define MICROPY_HW_FLASH_STORAGE_BYTES\s+\((\d+) \* 1024\)", header.read_text())
    if found is None:
        raise fail(f"no MICROPY_HW_FLASH_STORAGE_BYTES in {header}")
    return int(found.group(1)) * 1024


def build_rp2(
    name: str, root: Path, pico_sdk: str | None, picotool: str | None, out_root: Path, build_root: Path, jobs: int
) -> Path:
    from common import VERSION

    image = IMAGES[name]
    config = picotool_config_dir(picotool)
    sdk = Path(pico_sdk).expanduser().resolve() if pico_sdk else root / "lib" / "pico-sdk"
    build = build_root / name
    port = root / "ports" / "rp2"
    cache = build / "CMakeCache.txt"
    if cache.is_file() and f"CMAKE_HOME_DIRECTORY:INTERNAL={port}\n" not in cache.read_text():
        shutil.rmtree(build)  # configured from another checkout: CMake refuses to switch
    build.mkdir(parents=True, exist_ok=True)
    log = build / "siskin-build.log"
    log.write_text("")
    run(
        [
            "cmake",
            "-S",
            str(port),
            "-B",
            str(build),
            "-DPICO_BUILD_DOCS=0",
            f"-DMICROPY_BOARD={image.board_folder().name}",
            f"-DMICROPY_BOARD_DIR={image.board_folder()}",
            f"-DMICROPY_FROZEN_MANIFEST={MANIFEST}",
            f"-DPICO_SDK_PATH_OVERRIDE={sdk}",
            f"-Dpicotool_DIR={config}",
        ],
        log,
    )
    run(["cmake", "--build", str(build), "-j", str(jobs)], log)
    sym = elf_symbols(build / "firmware.elf")
    missing = [f for f in lwip_ppp_wraps() if f"__wrap_{f}" not in sym]
    if missing:
        raise fail(f"the image lacks {LWIP_PPP.parent}'s fixes ({', '.join(missing)}): its board folder includes them")
    heap = sym["__GcHeapEnd"] - sym["__GcHeapStart"]
    # The file system takes the end of the flash (its size is in our board
    # header); the image the rest, and the two must not overlap.
    firmware_region = sym["__micropy_flash_size__"] - storage_bytes(name)
    flash_left = firmware_region - (sym["__flash_binary_end"] - sym["__flash_binary_start"])
    if flash_left < 0:
        raise fail(
            f"the image overlaps the file system by {-flash_left} B: lower MICROPY_HW_FLASH_STORAGE_BYTES "
            f"in {image.board_folder() / 'mpconfigboard.h'}"
        )
    dest = out_root / name
    dest.mkdir(parents=True, exist_ok=True)
    uf2 = dest / f"siskin-{VERSION}.uf2"
    shutil.copyfile(build / "firmware.uf2", uf2)
    print(
        f"{uf2}: {uf2.stat().st_size} bytes; MicroPython heap {heap} B; flash left before the file system {flash_left} B"
    )
    return uf2


def build_unix32(root: Path, out_root: Path, build_root: Path, jobs: int) -> Path:
    probe = subprocess.run(
        ["gcc", "-m32", "-x", "c", "-", "-o", os.devnull],
        input="int main(void){return 0;}",
        text=True,
        capture_output=True,
    )
    if probe.returncode != 0:
        raise fail("gcc cannot build 32-bit programs (Debian: apt-get install gcc-multilib)")
    image = IMAGES["unix32"]
    port = root / "ports" / "unix"
    build = build_root / "unix32"
    build.mkdir(parents=True, exist_ok=True)
    log = build / "siskin-build.log"
    log.write_text("")
    run(["make", "-C", str(root / "mpy-cross"), "-j", str(jobs)], log)
    run(
        [
            "make",
            "-C",
            str(port),
            "-j",
            str(jobs),
            f"VARIANT={image.board}",
            f"BUILD={build}",
            "MICROPY_FORCE_32BIT=1",
            "MICROPY_PY_FFI=0",
            "MICROPY_PY_BTREE=0",
            f"FROZEN_MANIFEST={MANIFEST}",
            # firmware/manifest.py includes $(BOARD_DIR)/manifest.py: the variant's set.
            f"MICROPY_MANIFEST_BOARD_DIR={port / 'variants' / image.board}",
        ],
        log,
    )
    dest = out_root / "unix32"
    dest.mkdir(parents=True, exist_ok=True)
    exe = dest / "micropython"
    shutil.copy2(build / "micropython", exe)
    print(f"{exe.resolve()}: {exe.stat().st_size} bytes (32-bit unix MicroPython with Siskin frozen)")
    return exe


def build_image(
    board: str,
    out_root: Path,
    micropy: str | None,
    pico_sdk: str | None,
    picotool: str | None,
    jobs: int,
    build_root: Path | None = None,
) -> Path:
    """Build `board`'s image into out_root/<board>/; MicroPython's build
    directory is build_root/<board>/ (default: build/ of this repository)."""
    build_root = (build_root or REPO_ROOT / "build").expanduser().resolve()
    if board == "esp32":
        raise fail("the ESP32 image needs ESP-IDF, which this build does not drive: docs/boards.md has the recipe")
    if board not in IMAGES:
        raise fail(f"no image for {board!r} (one of: {', '.join(sorted(IMAGES))}; esp32: docs/boards.md)")
    root = check_sources(board, micropy or os.environ.get("MICROPY_DIR"), pico_sdk or os.environ.get("PICO_SDK_PATH"))
    if board == "unix32":
        return build_unix32(root, out_root, build_root, jobs)
    return build_rp2(
        board,
        root,
        pico_sdk or os.environ.get("PICO_SDK_PATH"),
        picotool or os.environ.get("PICOTOOL_DIR"),
        out_root,
        build_root,
        jobs,
    )
