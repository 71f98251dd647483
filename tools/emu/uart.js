// A UART of the emulated RP2040 as the PL011 behaves, on emulated time, with
// a host at its other end (tools/emu/run.js --uart0: a PPP peer).
//
// Theory of operation
// -------------------
// rp2040js 1.4.1's RPUART hands each byte written to its data register to
// `onByte` at once and takes bytes from `feedByte` into its RX FIFO, but:
// - it raises the TX interrupt again whenever anything clears it (its
//   checkInterrupts sets UARTTXINTR unconditionally: "TODO ... a proper FIFO
//   for TX"). MicroPython's rp2 UART enables that interrupt, so its handler
//   ran again as soon as it returned and `machine.UART(0, ...)` never
//   returned;
// - it never raises the receive-timeout interrupt (UARTRTINTR), on which
//   MicroPython's UART.IRQ_RXIDLE, and so network.PPP's input, depends;
// - it raises the RX interrupt for every byte, whatever the FIFO level set
//   in UARTIFLS (which it does not keep), and drops bytes fed into a full FIFO.
//
// This module replaces those parts on the instance (the package is not
// patched): a 32-byte TX FIFO that sends one character per 10 bit times of
// the programmed baud rate (8N1), TXFF/TXFE/BUSY in UARTFR, the TX interrupt
// raised when the FIFO drains to its trigger level (UARTIFLS), cleared by a
// write to UARTICR or by data written above it; RX bytes from the host
// enter the FIFO at the same pace and wait while it is full (as with RTS/CTS:
// nothing is lost), the RX interrupt at the FIFO's trigger level, and the
// receive timeout 32 bit times after the last character received while the
// FIFO holds data, cleared when the FIFO is read empty or by UARTICR (and
// raised again 32 bit times later if data is still waiting).

'use strict';

const UARTDR = 0x0;
const UARTFR = 0x18;
const UARTIFLS = 0x34;
const UARTIMSC = 0x38;
const UARTICR = 0x44;
const RTINTR = 1 << 6;
const TXINTR = 1 << 5;
const RXINTR = 1 << 4;
const FR_TXFE = 1 << 7;
const FR_RXFF = 1 << 6;
const FR_TXFF = 1 << 5;
const FR_RXFE = 1 << 4;
const FR_BUSY = 1 << 3;
const FIFO = 32;
// UARTIFLS levels: 1/8, 1/4, 1/2, 3/4, 7/8 of the FIFO.
const LEVELS = [4, 8, 16, 24, 28];
const DEFAULT_BAUD = 115200;

class UartModel {
  /** Take over `mcu.uart[index]`; `host` gets what the chip sends (host.write(byte)) and feeds it. */
  constructor(mcu, index, host) {
    this.mcu = mcu;
    this.uart = mcu.uart[index];
    this.host = host;
    this.tx = []; // the TX FIFO
    this.rxWaiting = []; // host bytes not yet in the RX FIFO
    this.ifls = 0x12; // reset value: both levels 1/2
    this.sending = false;
    this.rxPending = false; // rxAlarm is set (rp2040js's alarms keep `scheduled` true once fired)
    const { clock } = mcu;
    this.txAlarm = clock.createAlarm(() => this.txDone());
    this.rxAlarm = clock.createAlarm(() => {
      this.rxPending = false;
      this.rxNext();
    });
    this.rtAlarm = clock.createAlarm(() => this.rxTimeout());
    const u = this.uart;
    const read = u.readUint32.bind(u);
    const write = u.writeUint32.bind(u);
    u.checkInterrupts = () => this.update();
    u.readUint32 = (offset) => {
      if (offset === UARTDR) return this.readData();
      if (offset === UARTFR) return this.flags();
      if (offset === UARTIFLS) return this.ifls;
      return read(offset);
    };
    u.writeUint32 = (offset, value) => {
      if (offset === UARTDR) this.writeData(value & 0xff);
      else if (offset === UARTIFLS) this.ifls = value & 0x3f;
      else if (offset === UARTICR) {
        u.interruptStatus &= ~u.rawWriteValue;
        if (u.rawWriteValue & RTINTR && !u.rxFIFO.empty) this.rtAlarm.schedule(this.bitNanos() * 32);
        this.update();
      } else {
        write(offset, value);
        if (offset === UARTIMSC) this.update();
      }
    };
  }

  bitNanos() {
    const baud = this.uart.baudDivider ? this.uart.baudRate : DEFAULT_BAUD;
    return 1e9 / baud;
  }

  update() {
    const u = this.uart;
    this.mcu.setInterrupt(u.irq, !!(u.interruptStatus & u.interruptMask));
  }

  flags() {
    const u = this.uart;
    return (
      (u.rxFIFO.full ? FR_RXFF : 0) |
      (u.rxFIFO.empty ? FR_RXFE : 0) |
      (this.tx.length >= FIFO ? FR_TXFF : 0) |
      (this.tx.length === 0 ? FR_TXFE : 0) |
      (this.sending ? FR_BUSY : 0)
    );
  }

  txLevel() {
    return LEVELS[this.ifls & 7] || 16;
  }

  rxLevel() {
    return LEVELS[(this.ifls >> 3) & 7] || 16;
  }

  writeData(byte) {
    if (this.tx.length >= FIFO) return; // overrun: the PL011 drops it too
    this.tx.push(byte);
    if (this.tx.length > this.txLevel()) this.uart.interruptStatus &= ~TXINTR;
    if (!this.sending) {
      this.sending = true;
      this.txAlarm.schedule(this.bitNanos() * 10);
    }
    this.update();
  }

  txDone() {
    const before = this.tx.length;
    this.host.write(this.tx.shift());
    if (before > this.txLevel() && this.tx.length <= this.txLevel()) this.uart.interruptStatus |= TXINTR;
    if (this.tx.length) this.txAlarm.schedule(this.bitNanos() * 10);
    else this.sending = false;
    this.update();
  }

  readData() {
    const u = this.uart;
    const value = u.rxFIFO.pull();
    if (u.rxFIFO.itemCount < this.rxLevel()) u.interruptStatus &= ~RXINTR;
    if (u.rxFIFO.empty) {
      u.interruptStatus &= ~RTINTR;
      this.rtAlarm.cancel();
    }
    this.scheduleRx();
    this.update();
    return value;
  }

  /** Bytes from the host, for the chip's RX. */
  feed(bytes) {
    for (const b of bytes) this.rxWaiting.push(b);
    this.scheduleRx();
  }

  scheduleRx() {
    if (this.rxWaiting.length && !this.rxPending) {
      this.rxPending = true;
      this.rxAlarm.schedule(this.bitNanos() * 10);
    }
  }

  rxNext() {
    const u = this.uart;
    if (!this.rxWaiting.length || u.rxFIFO.full) return; // (a read of the FIFO schedules the next)
    u.rxFIFO.push(this.rxWaiting.shift());
    if (u.rxFIFO.itemCount >= this.rxLevel()) u.interruptStatus |= RXINTR;
    this.rtAlarm.schedule(this.bitNanos() * 32);
    this.scheduleRx();
    this.update();
  }

  rxTimeout() {
    if (!this.uart.rxFIFO.empty) {
      this.uart.interruptStatus |= RTINTR;
      this.update();
    }
  }
}

module.exports = { UartModel, RTINTR, TXINTR, RXINTR };
