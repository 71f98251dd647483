// Run the core tests under the 32-bit WebAssembly MicroPython port.
//
//   node tools/wasm_run.mjs [--heap 4M] [--] [run.py args...]
//   node tools/wasm_run.mjs [--heap 4M] --script PATH.py [args...]   (a MicroPython
//        script of the tree instead of the runner, e.g. tests/upy/sparkplug_heap.py)
//
// The port is the npm package @micropython/micropython-webassembly-pyscript
// (MicroPython 1.27, Emscripten, 32-bit object model: 31-bit small ints,
// 4-byte pointers, like the ESP32 and RP2040 boards). It has no access to
// the host file system (no NODEFS in this build), only an in-memory FS, so
// this copies the parts of the repository the core tests need into /siskin
// (common/, tests/__init__.py, tests/core/, tests/upy/, tests/fixtures/),
// chdirs there, and calls tests/upy/run.py's main(argv). It prints the
// runner's output, ending with "N passed, N failed, N skipped", and exits
// with the runner's status (1 on a Python exception in the runner itself).
//
// What this port (the "pyscript" build of 1.27.0) has and lacks, probed:
// - missing: socket, ssl/tls, cryptolib (no AES), machine, network, _thread,
//   btree; the file system is RAM only (no NODEFS).
// - pure-Python (frozen micropython-lib) instead of C: binascii (its
//   a2b_base64 takes bytes only: a str raises TypeError, where the unix
//   port's C binascii accepts it), os, time, io, collections, asyncio, hmac,
//   base64.
// - hashlib has sha256 only (the unix port also has md5 and sha1).
// - the GC heap grows on demand, so --heap is the initial size, not a cap.
// The core needs none of the missing modules; a core test that does must
// skipTest with a reason, and tests/host/test_wasm.py prints those.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const MOUNT = "/siskin";
const COPY = ["common", "tests/__init__.py", "tests/core", "tests/upy", "tests/fixtures"];
const SKIP_NAMES = new Set(["__pycache__", "node_modules", ".hypothesis"]);

function parseSize(text) {
  const m = /^(\d+)([kKmM]?)$/.exec(text);
  if (!m) throw new Error(`bad heap size ${text}`);
  const mult = { "": 1, k: 1024, K: 1024, m: 1048576, M: 1048576 }[m[2]];
  return Number(m[1]) * mult;
}

let heap = 4 * 1048576;
let script = null;
const args = process.argv.slice(2);
const runnerArgs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--heap") heap = parseSize(args[++i]);
  else if (args[i] === "--script") script = args[++i];
  else if (args[i] === "--") runnerArgs.push(...args.slice(i + 1)), (i = args.length);
  else runnerArgs.push(args[i]);
}

const { loadMicroPython } = await import("@micropython/micropython-webassembly-pyscript");

const mp = await loadMicroPython({
  heapsize: heap,
  stdout: (line) => {
    process.stdout.write(line + "\n");
  },
  stderr: (line) => {
    process.stderr.write(line + "\n");
  },
});

function copyInto(rel) {
  const src = path.join(repoRoot, rel);
  if (!fs.existsSync(src)) return 0;
  const dst = path.posix.join(MOUNT, rel);
  const st = fs.statSync(src);
  if (st.isFile()) {
    mp.FS.mkdirTree(path.posix.dirname(dst));
    mp.FS.writeFile(dst, fs.readFileSync(src));
    return 1;
  }
  let n = 0;
  mp.FS.mkdirTree(dst);
  for (const name of fs.readdirSync(src)) {
    if (SKIP_NAMES.has(name) || name.endsWith(".pyc") || name.endsWith(".mpy")) continue;
    n += copyInto(path.posix.join(rel, name));
  }
  return n;
}

let copied = 0;
for (const rel of script ? [...COPY, script] : COPY) copied += copyInto(rel);
console.log(`wasm: copied ${copied} files into ${MOUNT}; heap ${heap} bytes; node ${process.version}`);

mp.globals.set("runner_args", runnerArgs);
let status;
if (script) {
  mp.runPython(`
import os, sys
os.chdir("${MOUNT}")
sys.path.insert(0, "${MOUNT}/tests/upy/lib")
sys.path.insert(0, "${MOUNT}")
sys.argv[1:] = [str(a) for a in runner_args]
exec(open("${script}").read(), {"__name__": "__main__"})
`);
  process.exit(0);
}
try {
  mp.runPython(`
import os, sys
os.chdir("${MOUNT}")
sys.path.insert(0, "${MOUNT}/tests/upy")
import run
wasm_status = run.main([str(a) for a in runner_args])
`);
  status = Number(mp.globals.get("wasm_status"));
} catch (err) {
  // A Python exception escaping the runner (not a test failure: those are
  // caught and counted inside run.py).
  console.error(`wasm: runner raised: ${err && err.message ? err.message : err}`);
  status = 1;
}
process.exitCode = status;
