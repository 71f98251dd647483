"""An emulated RP2040 running a real .uf2, driven from Python.

    with EmuBoard(uf2, bootrom, files={"siskin.json": b"{...}"}) as board:
        board.expect(r"listening on", ms=20_000)

A Node process (tools/emu/run.js, rp2040js) runs the chip; this class sends
it one JSON command per line and reads one answer per command. Every wait
is in emulated time (`ms`), so a test never depends on how busy the machine
is. `files` become a littlefs image at the board's file-system offset
(tools/emu/fsimage.py), as if copied to the board before it booted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tools.emu.fsimage import FsLayout, make_fs_image

RUNNER = Path(__file__).resolve().parent / "run.js"


class EmuError(RuntimeError):
    pass


class EmuBoard:
    def __init__(
        self,
        uf2: Path,
        bootrom: Path,
        layout: FsLayout,
        files: dict[str, bytes] | None = None,
        flash: Path | None = None,
        workdir: Path | None = None,
        uart0: Path | None = None,
    ) -> None:
        node = shutil.which("node")
        if node is None:
            raise EmuError("node not found (Debian: apt-get install nodejs)")
        cmd = [node, str(RUNNER), "--bootrom", str(bootrom), "--uf2", str(uf2)]
        if flash is not None:
            cmd += ["--flash", str(flash)]
        if uart0 is not None:
            cmd += ["--uart0", str(uart0)]  # a Unix socket: the PPP peer (tools/emu/ppp_peer.py)
        if files is not None:
            if workdir is None:
                raise EmuError("files need a workdir for the file-system image")
            image = workdir / "fs.img"
            image.write_bytes(make_fs_image(layout, files))
            cmd += ["--fs", f"{layout.offset}:{image}"]
        self.log: list[str] = []  # the console output, as consumed
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.t_ms = 0
        self.resets = 0
        self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise EmuError(f"the emulator exited ({self.proc.wait()}); console so far:\n{self.console()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise EmuError(answer["error"] + "\nconsole so far:\n" + self.console())
        self.t_ms, self.resets = answer["t_ms"], answer["resets"]
        if "text" in answer:
            self.log.append(answer["text"])
        return answer

    def command(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def console(self) -> str:
        return "".join(self.log)

    def expect(self, pattern: str, ms: int) -> str:
        """The output up to the first match of `pattern` within `ms` emulated ms; EmuError if none."""
        answer = self.command("expect", pattern=pattern, ms=ms)
        if not answer["found"]:
            raise EmuError(f"no {pattern!r} within {ms} emulated ms (t={self.t_ms} ms); console:\n{self.console()}")
        return str(answer["text"])

    def run(self, ms: int) -> str:
        return str(self.command("run", ms=ms)["text"])

    def serve(self, ms: int) -> str:
        """Run `ms` emulated ms with the UART's host side served meanwhile; the console output."""
        return str(self.command("serve", ms=ms)["text"])

    def send(self, data: str) -> None:
        self.command("send", data=data)

    def reset(self) -> None:
        self.command("reset")

    def save_flash(self, path: Path) -> None:
        self.command("save_flash", path=str(path))

    def status(self) -> dict[str, Any]:
        return self.command("status")

    def exec_raw(self, code: str, ms: int) -> str:
        """Run `code` at the raw REPL (Ctrl-A; the board must be at the REPL); its output."""
        self.send("\r\x01")
        self.expect(r"raw REPL; CTRL-B to exit\r\n>", ms=2000)
        self.send(code + "\x04")
        self.expect(r"OK", ms=2000)
        out = self.expect(r"\x04", ms=ms)
        err = self.expect(r"\x04>", ms=2000)
        self.send("\x02")
        if err[:-2].strip():
            raise EmuError(f"the board raised:\n{err[:-2]}")
        return out[:-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.command("quit")
            except (EmuError, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> EmuBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
