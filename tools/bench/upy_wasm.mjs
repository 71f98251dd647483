// Run tools/bench/upy_heap.py under the 32-bit WebAssembly MicroPython port.
//
//   node tools/bench/upy_wasm.mjs [--heap 4M]
//
// Same port and loading as tools/wasm_run.mjs (npm package
// @micropython/micropython-webassembly-pyscript, MicroPython 1.27, 32-bit
// object model like the ESP32 and RP2040 boards): copies common/ and
// upy_heap.py into the in-memory file system and imports it; upy_heap prints
// one JSON line per measurement. The pyscript build grows its heap on demand
// (--heap is the initial size), which does not change gc.mem_alloc() deltas.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, "..", "..");
const MOUNT = "/siskin";

let heap = 4 * 1048576;
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--heap") {
    const m = /^(\d+)([kKmM]?)$/.exec(args[++i] || "");
    if (!m) throw new Error("bad --heap size");
    heap = Number(m[1]) * { "": 1, k: 1024, K: 1024, m: 1048576, M: 1048576 }[m[2]];
  }
}

const { loadMicroPython } = await import("@micropython/micropython-webassembly-pyscript");
const mp = await loadMicroPython({
  heapsize: heap,
  stdout: (line) => process.stdout.write(line + "\n"),
  stderr: (line) => process.stderr.write(line + "\n"),
});

function copy(src, dst) {
  const st = fs.statSync(src);
  if (st.isFile()) {
    mp.FS.mkdirTree(path.posix.dirname(dst));
    mp.FS.writeFile(dst, fs.readFileSync(src));
    return;
  }
  mp.FS.mkdirTree(dst);
  for (const name of fs.readdirSync(src)) {
    if (name === "__pycache__" || name.endsWith(".pyc") || name.endsWith(".mpy")) continue;
    copy(path.join(src, name), path.posix.join(dst, name));
  }
}

copy(path.join(repoRoot, "common"), `${MOUNT}/common`);
copy(path.join(here, "upy_heap.py"), `${MOUNT}/upy_heap.py`);
try {
  mp.runPython(`
import os, sys
os.chdir("${MOUNT}")
sys.path.insert(0, "${MOUNT}")
import upy_heap
`);
} catch (err) {
  console.error(`upy_wasm: ${err && err.message ? err.message : err}`);
  process.exitCode = 1;
}
