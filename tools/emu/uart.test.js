// Unit tests of the UART model (tools/emu/uart.js) on a bare rp2040js chip:
// the registers written as MicroPython's rp2 UART writes them, emulated time
// advanced by hand. tests/host/test_emu_runner.py runs them in `make test`.

'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { RP2040 } = require('rp2040js');
const { UartModel, RTINTR, TXINTR, RXINTR } = require('./uart.js');

const BASE = 0x40034000; // UART0
const DR = 0x0;
const FR = 0x18;
const IBRD = 0x24;
const FBRD = 0x28;
const IFLS = 0x34;
const IMSC = 0x38;
const RIS = 0x3c;
const ICR = 0x44;
const TXFF = 1 << 5;
const BUSY = 1 << 3;
const TXFE = 1 << 7;

function chip() {
  const mcu = new RP2040();
  mcu.logger = { debug() {}, info() {}, warn() {}, error(c, m) { throw new Error(m); } };
  const sent = [];
  const model = new UartModel(mcu, 0, { write: (b) => sent.push(b) });
  const reg = (off, value) => (value === undefined ? mcu.readUint32(BASE + off) : mcu.writeUint32(BASE + off, value));
  // 115200 baud from clk_peri 125 MHz (the SDK's divisors), FIFOs on, both levels 1/2.
  reg(IBRD, 67);
  reg(FBRD, 52);
  reg(IFLS, 0x12);
  return { mcu, model, sent, reg, charNanos: model.bitNanos() * 10 };
}

test('a cleared TX interrupt stays cleared until the FIFO drains to its level', () => {
  const { mcu, sent, reg, charNanos } = chip();
  reg(IMSC, TXINTR | RXINTR | RTINTR);
  assert.strictEqual(reg(RIS) & TXINTR, 0); // rp2040js raised it at once, for ever
  for (let i = 0; i < 20; i++) reg(DR, 0x41 + i);
  assert.strictEqual(reg(FR) & (TXFE | BUSY), BUSY);
  reg(ICR, TXINTR);
  assert.strictEqual(reg(RIS) & TXINTR, 0);
  mcu.clock.tick(charNanos * 3.5);
  assert.strictEqual(sent.length, 3); // one character per 10 bit times
  assert.strictEqual(reg(RIS) & TXINTR, 0); // 17 left: above the level (16)
  mcu.clock.tick(charNanos);
  assert.strictEqual(reg(RIS) & TXINTR, TXINTR);
  reg(ICR, TXINTR);
  mcu.clock.tick(charNanos * 20);
  assert.strictEqual(sent.length, 20);
  assert.strictEqual(reg(RIS) & TXINTR, 0); // not raised again on an empty FIFO
  assert.strictEqual(reg(FR) & (TXFE | BUSY), TXFE);
});

test('a full TX FIFO says so and drops what overruns it', () => {
  const { mcu, sent, reg, charNanos } = chip();
  for (let i = 0; i < 40; i++) reg(DR, i);
  assert.strictEqual(reg(FR) & TXFF, TXFF);
  mcu.clock.tick(charNanos * 50);
  assert.deepStrictEqual(sent, [...Array(32).keys()]);
});

test('the receive timeout comes 32 bit times after the last byte while data waits', () => {
  const { mcu, model, reg, charNanos } = chip();
  reg(IMSC, RXINTR | RTINTR);
  model.feed([1, 2, 3]);
  mcu.clock.tick(charNanos * 3);
  assert.strictEqual(mcu.uart[0].rxFIFO.itemCount, 3);
  assert.strictEqual(reg(RIS) & (RXINTR | RTINTR), 0); // below the RX level (16), not idle yet
  mcu.clock.tick(model.bitNanos() * 31);
  assert.strictEqual(reg(RIS) & RTINTR, 0);
  mcu.clock.tick(model.bitNanos() * 2);
  assert.strictEqual(reg(RIS) & RTINTR, RTINTR);
  assert.deepStrictEqual([reg(DR), reg(DR), reg(DR)], [1, 2, 3]);
  assert.strictEqual(reg(RIS) & RTINTR, 0); // read empty: cleared
});

test('the RX interrupt comes at the FIFO level and a full FIFO holds the host back', () => {
  const { mcu, model, reg, charNanos } = chip();
  model.feed([...Array(40).keys()]);
  mcu.clock.tick(charNanos * 16);
  assert.strictEqual(reg(RIS) & RXINTR, RXINTR);
  mcu.clock.tick(charNanos * 30);
  assert.strictEqual(mcu.uart[0].rxFIFO.itemCount, 32);
  assert.strictEqual(model.rxWaiting.length, 8); // waiting, not lost
  const got = [];
  for (let i = 0; i < 32; i++) got.push(reg(DR));
  mcu.clock.tick(charNanos * 10);
  for (let i = 0; i < 8; i++) got.push(reg(DR));
  assert.deepStrictEqual(got, [...Array(40).keys()]);
});
