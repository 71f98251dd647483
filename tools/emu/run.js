#!/usr/bin/env node
// The emulated board as a process: tools/emu/board.py (and a person) drive it
// with one JSON command per line on stdin; each gets one JSON line back.
//
//   node tools/emu/run.js --bootrom bootrom.bin --uf2 firmware.uf2 [--fs OFFSET:FILE ...] [--flash FILE]
//       [--uart0 SOCKET]
//
// --flash starts from a whole flash image saved by `save_flash` (the .uf2 is
// then written over it, as a copy to the BOOTSEL drive would); --fs writes a
// file (a littlefs image) at a byte offset of the flash. --uart0 connects
// UART0 (GP0 TX, GP1 RX; tools/emu/uart.js) to a Unix socket: what the chip
// sends goes there, what comes from it is the chip's RX (a PPP peer,
// tools/emu/ppp_peer.py).
//
// Commands (times are emulated milliseconds; every answer has t_ms, the
// emulated time since power-on, and resets, the resets so far):
//   {"op": "expect", "pattern": REGEX, "ms": N}  run until the console output
//       not yet consumed matches (then consumed up to the match's end), at
//       most N ms: {"found": bool, "text": the consumed (or, not found, the
//       pending) output}
//   {"op": "run", "ms": N}        run N ms: {"text": the output meanwhile}
//   {"op": "serve", "ms": N}      run N ms in 1 ms slices, the UART socket
//       served between them (so the host side talks to the chip meanwhile)
//   {"op": "send", "data": STR}   queue console input (latin-1 bytes)
//   {"op": "reset"}               reset the chip (the RUN pin): flash kept
//   {"op": "save_flash", "path": FILE}
//   {"op": "status"}              {"flash_ops", "warnings", "reset_log"}
//   {"op": "quit"}

'use strict';

const fs = require('fs');
const net = require('net');
const readline = require('readline');
const { Board, loadUf2 } = require('./rp2040.js');

function parseArgs(argv) {
  const opts = { fs: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${key} needs a value`);
    if (key === '--bootrom') opts.bootrom = value;
    else if (key === '--uf2') opts.uf2 = value;
    else if (key === '--flash') opts.flash = value;
    else if (key === '--uart0') opts.uart0 = value;
    else if (key === '--fs') {
      const [offset, file] = [value.slice(0, value.indexOf(':')), value.slice(value.indexOf(':') + 1)];
      opts.fs.push({ offset: Number(offset), file });
    } else throw new Error(`unknown option ${key}`);
  }
  if (!opts.bootrom || !opts.uf2) {
    throw new Error('usage: run.js --bootrom FILE --uf2 FILE [--fs OFFSET:FILE ...] [--flash FILE]');
  }
  return opts;
}

/** UART0 to a Unix socket: the chip's bytes batched per turn of Node's loop. */
function connectUart(board, path) {
  const sock = net.createConnection(path);
  let out = [];
  board.uartHost = {
    write(byte) {
      out.push(byte);
    },
  };
  sock.on('data', (data) => board.feedUart(data));
  sock.on('error', (e) => process.stderr.write(`uart0: ${e}\n`));
  return () => {
    if (out.length) {
      sock.write(Buffer.from(out));
      out = [];
    }
  };
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const board = new Board(fs.readFileSync(opts.bootrom));
  const flushUart = opts.uart0 ? connectUart(board, opts.uart0) : () => {};
  if (opts.flash) board.flash.set(fs.readFileSync(opts.flash));
  const blocks = loadUf2(fs.readFileSync(opts.uf2), board.flash);
  for (const { offset, file } of opts.fs) board.flash.set(fs.readFileSync(file), offset);
  board.boot();
  let pending = '';
  const drain = () => {
    pending += board.takeOutput().toString('latin1');
  };
  const reply = (obj) => {
    const ms = Math.round(board.nanos / 1e6);
    process.stdout.write(JSON.stringify({ ...obj, t_ms: ms, resets: board.resets.length }) + '\n');
  };
  const commands = {
    expect({ pattern, ms }) {
      const re = new RegExp(pattern, 'm');
      let match = null;
      const found = board.run(board.nanos + ms * 1e6, () => {
        drain();
        match = re.exec(pending);
        return match !== null;
      });
      flushUart();
      if (!found) return { found, text: pending };
      const end = match.index + match[0].length;
      const text = pending.slice(0, end);
      pending = pending.slice(end);
      return { found, text, groups: match.slice(1) };
    },
    run({ ms }) {
      board.run(board.nanos + ms * 1e6);
      flushUart();
      drain();
      const text = pending;
      pending = '';
      return { text };
    },
    send({ data }) {
      board.send(Buffer.from(data, 'latin1'));
      return {};
    },
    reset() {
      board.resets.push({ t_ms: Math.round(board.nanos / 1e6), why: 'reset pin' });
      board.boot();
      return {};
    },
    save_flash({ path }) {
      fs.writeFileSync(path, board.flash);
      return {};
    },
    status() {
      return { flash_ops: board.flashOps, warnings: board.logger.warnings, reset_log: board.resets };
    },
  };
  // serve: emulated time in 1 ms slices, Node's loop (the UART's socket) turned between them.
  const serve = ({ ms }) =>
    new Promise((resolve, reject) => {
      const until = board.nanos + ms * 1e6;
      const step = () => {
        try {
          board.run(Math.min(until, board.nanos + 1e6));
          flushUart();
        } catch (e) {
          reject(e);
          return;
        }
        if (board.nanos >= until) {
          drain();
          const text = pending;
          pending = '';
          resolve({ text });
        } else setImmediate(step);
      };
      step();
    });
  reply({ ready: true, uf2_blocks: blocks });
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    let cmd;
    try {
      cmd = JSON.parse(line);
      if (cmd.op === 'quit') process.exit(0);
      if (cmd.op === 'serve') {
        serve(cmd).then(reply, (e) => reply({ error: String(e && e.stack ? e.stack : e) }));
        return;
      }
      if (!commands[cmd.op]) throw new Error(`unknown op ${JSON.stringify(cmd.op)}`);
      reply(commands[cmd.op](cmd));
    } catch (e) {
      reply({ error: String(e && e.stack ? e.stack : e) });
    }
  });
  rl.on('close', () => process.exit(0));
}

main();
