// Unit tests of the runner's own parts (node --test; tests/host/test_emu_runner.py
// runs them in `make test`): no bootrom or firmware is needed. A synthetic ROM
// holds what the runner reads of the real one (the 'Mu' magic and the function
// table), and the trap stubs are called by setting the registers and PC by hand.

'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { Board, loadUf2, patchBootrom, FLASH_BASE, FLASH_TRAPS } = require('./rp2040.js');

const code = (name) => name.charCodeAt(0) | (name.charCodeAt(1) << 8);

/** A ROM with the magic at 0x10, a function table at 0x100 naming `names`
 * (each pointing at 0x200), and a `b .` at 0x300 to return to. */
function syntheticRom(names) {
  const rom = new Uint8Array(1024);
  const view = new DataView(rom.buffer);
  view.setUint32(0, 0x20041f00, true); // initial SP
  view.setUint32(4, 0x301, true); // reset vector: the loop
  view.setUint16(0x10, code('Mu'), true);
  view.setUint16(0x14, 0x100, true);
  names.forEach((name, i) => {
    view.setUint16(0x100 + i * 4, code(name), true);
    view.setUint16(0x102 + i * 4, 0x201, true);
  });
  view.setUint16(0x300, 0xe7fe, true); // b .
  return rom;
}

/** Call ROM routine `name` through the patched table with r0..r2; run until it has returned. */
function callRom(board, name, args) {
  const view = new DataView(board.rom.buffer);
  let entry = view.getUint16(0x14, true);
  while (view.getUint16(entry, true) !== code(name)) entry += 4;
  const core = board.mcu.core;
  args.forEach((v, i) => {
    core.registers[i] = v;
  });
  core.LR = 0x301;
  core.PC = view.getUint16(entry + 2, true) & ~1;
  board.run(board.nanos + 10e3);
  assert.strictEqual(core.PC, 0x300, `${name} returned to its caller`);
}

test('the six flash routines of the function table are pointed at trap stubs; the rest is kept', () => {
  const rom = patchBootrom(syntheticRom([...FLASH_TRAPS, 'MC']));
  const view = new DataView(rom.buffer);
  const stubs = new Set();
  for (let i = 0; i < FLASH_TRAPS.length; i++) {
    const ptr = view.getUint16(0x102 + i * 4, true);
    assert.strictEqual(ptr & 1, 1, 'a Thumb address');
    assert.strictEqual(view.getUint16(ptr & ~1, true), 0xbe00 | i, 'BKPT #trap');
    assert.strictEqual(view.getUint16((ptr & ~1) + 2, true), 0x4770, 'BX LR');
    stubs.add(ptr);
  }
  assert.strictEqual(stubs.size, FLASH_TRAPS.length);
  assert.strictEqual(view.getUint16(0x102 + FLASH_TRAPS.length * 4, true), 0x201, 'memcpy untouched');
});

test('a ROM without the magic or without a flash routine is refused', () => {
  const bad = syntheticRom(FLASH_TRAPS);
  bad[0x10] = 0;
  assert.throws(() => patchBootrom(bad), /no 'Mu' magic/);
  assert.throws(() => patchBootrom(syntheticRom(['IF', 'EX', 'RP', 'FC', 'CX'])), /no RE in its function table/);
});

test('erase sets whole sectors to 0xFF; program ANDs pages in, as NOR flash does', () => {
  const board = new Board(syntheticRom(FLASH_TRAPS));
  board.flash.fill(0x0f, 0x1000, 0x3000);
  board.boot();
  callRom(board, 'RE', [0x1000, 0x1000, 0x1000, 0xd8]);
  assert.ok(board.flash.subarray(0x1000, 0x2000).every((b) => b === 0xff), 'the sector is erased');
  assert.ok(board.flash.subarray(0x2000, 0x3000).every((b) => b === 0x0f), 'the next one is not');
  const data = 0x20001000;
  for (let i = 0; i < 256; i++) board.mcu.writeUint8(data + i, i);
  callRom(board, 'RP', [0x2000, data, 256]);
  for (let i = 0; i < 256; i++) assert.strictEqual(board.flash[0x2000 + i], i & 0x0f, 'programming only clears bits');
  callRom(board, 'RP', [0x1000, data, 256]);
  for (let i = 0; i < 256; i++) assert.strictEqual(board.flash[0x1000 + i], i);
  assert.deepStrictEqual(board.flashOps, { erase: 1, program: 2 });
  callRom(board, 'FC', []);
  assert.throws(() => callRom(board, 'RE', [0x1800, 0x1000]), /not whole sectors/);
});

test('the flash survives a reset; emulated time goes on', () => {
  const board = new Board(syntheticRom(FLASH_TRAPS));
  board.boot();
  callRom(board, 'RE', [0, 0x1000]);
  board.flash[5] = 0x42;
  board.run(board.nanos + 2e6);
  const before = board.nanos;
  board.boot();
  assert.strictEqual(board.flash[5], 0x42);
  assert.ok(board.nanos >= before && before >= 2e6);
});

test('the watchdog resets the chip once it runs out, and the reset is logged', () => {
  const board = new Board(syntheticRom(FLASH_TRAPS));
  board.boot();
  const wdt = board.mcu.peripherals[0x40058];
  wdt.writeUint32(0x04, 2000); // LOAD: 1 ms (the counter counts down twice a microsecond)
  wdt.writeUint32(0x00, 1 << 30); // CTRL: ENABLE
  board.run(board.nanos + 5e6);
  assert.strictEqual(board.resets.length, 1);
  assert.strictEqual(board.resets[0].why, 'watchdog');
  assert.ok(board.resets[0].t_ms <= 2);
});

test('a .uf2 lands at its target addresses; a block without the magic is refused', () => {
  const block = (addr, fill) => {
    const b = new Uint8Array(512);
    const v = new DataView(b.buffer);
    v.setUint32(0, 0x0a324655, true);
    v.setUint32(4, 0x9e5d5157, true);
    v.setUint32(12, addr, true);
    v.setUint32(16, 256, true);
    b.fill(fill, 32, 32 + 256);
    v.setUint32(508, 0x0ab16f30, true);
    return b;
  };
  const flash = new Uint8Array(0x10000).fill(0xff);
  const image = new Uint8Array([...block(FLASH_BASE, 1), ...block(FLASH_BASE + 0x100, 2)]);
  assert.strictEqual(loadUf2(image, flash), 2);
  assert.strictEqual(flash[0], 1);
  assert.strictEqual(flash[0x1ff], 2);
  assert.strictEqual(flash[0x200], 0xff);
  image[0] = 0;
  assert.throws(() => loadUf2(image, flash), /no UF2 magic/);
});

test('an armed console read waits for input, then takes what fits; the rest waits for the next one', () => {
  const board = new Board(syntheticRom(FLASH_TRAPS));
  board.boot();
  const usb = board.mcu.usbCtrl;
  board.cdc.outEndpoint = 2; // (what enumeration would find)
  const done = [];
  usb.endpointReadDone = (endpoint, buffer) => done.push([endpoint, Buffer.from(buffer).toString()]);
  usb.onEndpointRead(2, 4);
  assert.deepStrictEqual(done, [], 'no empty transfer: the firmware sleeps until there is input');
  board.send(Buffer.from('print(1)'));
  assert.deepStrictEqual(done, [[2, 'prin']]);
  usb.onEndpointRead(2, 64);
  assert.deepStrictEqual(done, [[2, 'prin'], [2, 't(1)']], 'beyond one buffer nothing is lost');
  usb.onEndpointRead(2, 64);
  assert.strictEqual(done.length, 2);
});

test('a PIO runs on emulated time, one step per core cycle, and only its enabled state machines', () => {
  const board = new Board(syntheticRom(FLASH_TRAPS));
  board.boot();
  const PIO0 = 0x50200000;
  const [CTRL, INSTR_MEM0, SM0_INSTR, SM1_INSTR] = [0x000, 0x048, 0x0d8, 0x0f0];
  board.mcu.writeUint32(PIO0 + INSTR_MEM0, 0x0040); // 0: jmp x-- 0
  board.mcu.writeUint32(PIO0 + SM0_INSTR, 0xe03f); // set x, 31
  board.mcu.writeUint32(PIO0 + SM1_INSTR, 0xe03f);
  const [sm0, sm1] = board.mcu.pio[0].machines;
  board.mcu.writeUint32(PIO0 + CTRL, 1); // SM0 enabled, SM1 not
  assert.strictEqual(sm0.x, 31, 'nothing runs outside emulated time');
  board.mcu.core.PC = 0x300; // b . (two cycles a turn)
  board.run(board.nanos + 16 * 8); // 16 cycles at 125 MHz
  assert.strictEqual(sm0.x, 31 - 16);
  assert.strictEqual(sm1.x, 31, 'a disabled state machine does not execute');
});
