// An RP2040 board in rp2040js (npm, pinned in package.json) that boots a real
// MicroPython .uf2: what the npm package leaves to its user.
//
// Theory of operation
// -------------------
// rp2040js emulates the Cortex-M0+ core and the peripherals, but ships no
// bootrom and models no flash chip behind the SSI: a firmware that writes its
// file system (MicroPython formats littlefs on a fresh flash) gets nothing
// written, and its ROM calls (memcpy, the soft float and double tables, the
// bit helpers) go nowhere. So:
//
// - The bootrom is a real one, built from raspberrypi/pico-bootrom (the
//   on-chip B2 sources): memory, bit and float helpers run as on the chip.
//   Its six flash routines, which would bit-bang the SSI to a chip that is
//   not there, are replaced in the ROM's function table by stubs that trap
//   to JavaScript (BKPT #n; BX LR): erase sets 0xFF, program ANDs the bytes
//   in (NOR flash only clears bits), the XIP and cache routines do nothing
//   (rp2040js reads the flash array directly: there is no cache to flush).
//   GCC 12 makes the ROM 183 B bigger than the chip's 16 KB (so it is
//   linked for 32 KB, padded), hence a 64 KB ROM here, the stubs at its
//   end (the table's pointers are 16-bit).
// - Boot: like rp2040js's own demos, execution starts at the flash's boot2
//   (0x10000000) with the ROM's initial stack: the ROM's own path reads
//   boot2 over SSI commands rp2040js does not answer.
// - A reset (the watchdog, machine.reset()) is a new RP2040 with the same
//   flash array and a fresh clock; emulated time keeps counting across it.
// - The console is USB CDC (rp2040js's host side, which enumerates the
//   device), but the OUT transfers (host to board) are ours: rp2040js's
//   host answers every buffer the firmware arms at once, 10 us later, with
//   whatever its 512-byte FIFO holds, so an idle board took an empty
//   transfer's interrupt every 10 us (the CPU never slept: an idle second
//   cost as much as a busy one) and input beyond 512 bytes was dropped.
//   Here an armed buffer waits, as on a real bus, until there is input.
// - The PIO blocks run on emulated time too: rp2040js steps them from
//   Node's event loop (setTimeout, 1000 steps a turn), which a runner that
//   executes the core synchronously never reaches until its command ends,
//   so a PIO transfer took as long as the command (the Pico W's CYW43 driver
//   waits on one: its failed start took 0.35 s or 5 s as the commands fell)
//   and no two runs were alike. Here a running PIO takes one step per core
//   cycle, in the same loop (rp2040js models no clock divider; a state
//   machine stalled on a FIFO is not stepped, the FIFO's other side wakes
//   it), and only its enabled state machines execute: rp2040js's step runs all four, so a
//   disabled one that the firmware was setting up ran meanwhile and took
//   the words meant for its X and Y registers (the CYW43 driver's second
//   start never finished its first transfer).
//
// Everything runs on emulated time: nothing depends on the wall clock, so
// a run is the same on a loaded machine.

'use strict';

const { RP2040, USBCDC } = require('rp2040js');
const { UartModel } = require('./uart.js');

const FLASH_BASE = 0x10000000;
const FLASH_BYTES = 2 * 1024 * 1024; // the Pico's W25Q16 (2 MB)
const ROM_BYTES = 64 * 1024;
const CYCLE_NANOS = 1e9 / 125e6; // rp2040js counts instructions at 125 MHz

// rom_table_code(c1, c2) of pico-sdk: c1 | c2 << 8.
const romCode = (name) => name.charCodeAt(0) | (name.charCodeAt(1) << 8);
// The flash routines the SDK looks up in the ROM's function table, each
// with its trap number.
const FLASH_TRAPS = ['IF', 'EX', 'RE', 'RP', 'FC', 'CX'];
const FLASH_SECTOR = 4096;
const FLASH_PAGE = 256;

// UF2 (github.com/microsoft/uf2): 512-byte blocks, 476 bytes of payload each.
const UF2_MAGIC0 = 0x0a324655;
const UF2_MAGIC1 = 0x9e5d5157;
const UF2_MAGIC_END = 0x0ab16f30;

/** Write the payload of every block of a .uf2 image into `flash` (bytes at 0x10000000). */
function loadUf2(image, flash) {
  const view = new DataView(image.buffer, image.byteOffset, image.byteLength);
  let blocks = 0;
  for (let off = 0; off + 512 <= image.length; off += 512) {
    if (view.getUint32(off, true) !== UF2_MAGIC0 || view.getUint32(off + 4, true) !== UF2_MAGIC1 ||
        view.getUint32(off + 508, true) !== UF2_MAGIC_END) {
      throw new Error(`uf2: block ${off / 512} has no UF2 magic`);
    }
    const target = view.getUint32(off + 12, true);
    const size = view.getUint32(off + 16, true);
    if (size > 476 || target < FLASH_BASE || target + size > FLASH_BASE + flash.length) {
      throw new Error(`uf2: block ${off / 512} writes ${size} B at 0x${target.toString(16)}, outside the flash`);
    }
    flash.set(image.subarray(off + 32, off + 32 + size), target - FLASH_BASE);
    blocks++;
  }
  if (!blocks) throw new Error('uf2: no blocks');
  return blocks;
}

/** The ROM as 32-bit words with the flash routines of its function table
 * pointed at trap stubs; `traps` maps each trap number to its name. */
function patchBootrom(rom) {
  if (rom.length > ROM_BYTES - 64) throw new Error(`bootrom: ${rom.length} B, more than ${ROM_BYTES - 64}`);
  const bytes = new Uint8Array(ROM_BYTES);
  bytes.set(rom);
  const view = new DataView(bytes.buffer);
  if (view.getUint16(0x10, true) !== romCode('Mu')) throw new Error("bootrom: no 'Mu' magic at 0x10");
  const stubs = ROM_BYTES - 64;
  const found = new Set();
  for (let entry = view.getUint16(0x14, true); view.getUint16(entry, true) !== 0; entry += 4) {
    const trap = FLASH_TRAPS.findIndex((name) => romCode(name) === view.getUint16(entry, true));
    if (trap < 0) continue;
    const stub = stubs + trap * 4;
    view.setUint16(stub, 0xbe00 | trap, true); // BKPT #trap
    view.setUint16(stub + 2, 0x4770, true); // BX LR
    view.setUint16(entry + 2, stub | 1, true); // Thumb address
    found.add(FLASH_TRAPS[trap]);
  }
  const missing = FLASH_TRAPS.filter((name) => !found.has(name));
  if (missing.length) throw new Error(`bootrom: no ${missing.join(', ')} in its function table`);
  return new Uint32Array(bytes.buffer);
}

// rp2040js's WaitType of a state machine stalled on a FIFO (rxFIFO, txFIFO,
// Out): the FIFO's other side resumes it (writeFIFO/readFIFO call checkWait).
const FIFO_WAITS = [false, false, true, true, false, true];

/** Whether a PIO block has a state machine to step: enabled and not stalled
 * on a FIFO (a stalled one costs nothing until the core or DMA serves it). */
function pioBusy(pio) {
  if (pio.stopped) return false;
  for (const m of pio.machines) if (m.enabled && !(m.waiting && FIFO_WAITS[m.waitType])) return true;
  return false;
}

/** One clock of a PIO block: an instruction of each enabled state machine. */
function stepPio(pio) {
  for (const machine of pio.machines) if (machine.enabled) machine.step();
  pio.checkChangedPins();
}

class QuietLogger {
  constructor() {
    this.warnings = 0;
  }
  debug() {}
  info() {}
  warn() {
    this.warnings++;
  }
  error(component, message) {
    throw new Error(`rp2040js ${component}: ${message}`);
  }
}

class Board {
  /** `rom`: the bootrom binary; `flash`: the flash's bytes (kept across resets). */
  constructor(rom) {
    this.rom = patchBootrom(rom);
    this.flash = new Uint8Array(FLASH_BYTES).fill(0xff);
    this.output = []; // console bytes, in chunks
    this.input = []; // console bytes the firmware has not taken yet
    this.resets = []; // {t_ms, why}
    this.flashOps = { erase: 0, program: 0 };
    this.nanosBefore = 0; // emulated time of the boots before this one
    this.pendingReset = null;
    this.logger = new QuietLogger();
    this.uartHost = null; // {write(byte)}: the host at UART0's other end (tools/emu/uart.js), or none
    this.uart0 = null;
  }

  get nanos() {
    return this.nanosBefore + this.clock.nanos;
  }

  /** Power on (or reset): a new chip with the same flash. */
  boot() {
    if (this.clock) this.nanosBefore += this.clock.nanos;
    const mcu = new RP2040(); // with a new simulation clock of its own
    this.clock = mcu.clock;
    mcu.logger = this.logger;
    mcu.bootrom = this.rom;
    mcu.flash.set(this.flash);
    this.flash = mcu.flash.subarray(0, FLASH_BYTES); // the chip's array from now on
    mcu.onBreak = (n) => this.trap(n);
    const watchdog = mcu.peripherals[0x40058];
    watchdog.onWatchdogTrigger = () => {
      // The chip resets now: this one's watchdog must not fire again (its
      // periodic alarm would, at once, within the same clock tick).
      watchdog.alarm.enable = false;
      watchdog.timer.enable = false;
      this.pendingReset = 'watchdog';
    };
    for (const pio of mcu.pio) pio.run = () => {}; // stepped by slice() instead
    this.mcu = mcu;
    this.cdc = new USBCDC(mcu.usbCtrl);
    this.cdc.onSerialData = (buffer) => this.output.push(Buffer.from(buffer));
    this.armedRead = 0; // the size of the OUT buffer the firmware armed (0: none)
    mcu.usbCtrl.onEndpointRead = (endpoint, size) => {
      if (endpoint === this.cdc.outEndpoint) {
        this.armedRead = size;
        this.feedConsole();
      }
    };
    // A reset drops what was on the wire: the new chip's UART starts empty.
    this.uart0 = this.uartHost ? new UartModel(mcu, 0, this.uartHost) : null;
    mcu.core.reset(); // SP and PC from the ROM's vectors
    mcu.core.PC = FLASH_BASE; // then straight to boot2 (see the header)
  }

  /** A ROM flash routine: registers r0..r3 in, nothing out. */
  trap(n) {
    const name = FLASH_TRAPS[n];
    const r = this.mcu.core.registers;
    if (name === 'RE') {
      const [addr, count] = [r[0] >>> 0, r[1] >>> 0];
      if (addr % FLASH_SECTOR || count % FLASH_SECTOR || addr + count > FLASH_BYTES) {
        throw new Error(`flash_range_erase(0x${addr.toString(16)}, ${count}): not whole sectors of the flash`);
      }
      this.flash.fill(0xff, addr, addr + count);
      this.flashOps.erase++;
    } else if (name === 'RP') {
      const [addr, data, count] = [r[0] >>> 0, r[1] >>> 0, r[2] >>> 0];
      if (addr % FLASH_PAGE || count % FLASH_PAGE || addr + count > FLASH_BYTES) {
        throw new Error(`flash_range_program(0x${addr.toString(16)}, ${count}): not whole pages of the flash`);
      }
      for (let i = 0; i < count; i++) this.flash[addr + i] &= this.mcu.readUint8(data + i);
      this.flashOps.program++;
    } else if (name === undefined) {
      throw new Error(`BKPT #${n} at 0x${(this.mcu.core.PC - 2).toString(16)}: the firmware stopped (a breakpoint)`);
    }
    // IF, EX, FC, CX: nothing to do without a flash chip and an XIP cache.
  }

  /** Queue bytes for the console. */
  send(bytes) {
    this.input.push(...bytes);
    this.feedConsole();
  }

  /** Complete the armed OUT transfer with queued input, if both are there. */
  feedConsole() {
    if (!this.armedRead || !this.input.length) return;
    const chunk = Uint8Array.from(this.input.splice(0, this.armedRead));
    this.armedRead = 0;
    this.mcu.usbCtrl.endpointReadDone(this.cdc.outEndpoint, chunk);
  }

  /** Bytes from the host for UART0's RX (paced at its baud rate). */
  feedUart(bytes) {
    if (this.uart0) this.uart0.feed(bytes);
  }

  takeOutput() {
    const out = Buffer.concat(this.output);
    this.output = [];
    return out;
  }

  /** Run until `stop()` answers true (checked every slice) or `untilNanos`; false on the time limit. */
  run(untilNanos, stop) {
    for (;;) {
      if (stop && stop()) return true;
      if (this.nanos >= untilNanos) return false;
      if (this.pendingReset) {
        this.resets.push({ t_ms: Math.round(this.nanos / 1e6), why: this.pendingReset });
        this.pendingReset = null;
        this.boot();
      }
      this.slice(Math.min(untilNanos - this.nanos, 1e6)); // at most 1 ms of emulated time per slice
    }
  }

  slice(nanos) {
    const { mcu, clock } = this;
    const [pio0, pio1] = mcu.pio;
    const end = clock.nanos + nanos;
    while (clock.nanos < end && !this.pendingReset) {
      const pioRunning = pioBusy(pio0) || pioBusy(pio1);
      if (mcu.core.waiting && !pioRunning) {
        const next = clock.nanosToNextAlarm;
        clock.tick(next > 0 && clock.nanos + next <= end ? next : end - clock.nanos);
        continue;
      }
      const cycles = mcu.core.waiting ? 1 : mcu.core.executeInstruction();
      clock.tick(cycles * CYCLE_NANOS);
      if (pioRunning) {
        for (let i = 0; i < cycles; i++) {
          if (pioBusy(pio0)) stepPio(pio0);
          if (pioBusy(pio1)) stepPio(pio1);
        }
      }
    }
  }
}

module.exports = { Board, loadUf2, patchBootrom, FLASH_BASE, FLASH_BYTES, FLASH_TRAPS };
