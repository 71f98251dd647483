# The firmware's only use of MicroPython's asyncio internals, in one place.
#
# MicroPython's asyncio (extmod/asyncio/core.py) has no public awaitable
# accept() or connect-completion, and no way to keep a socket in its poller
# between reads. So the network shell (firmware/shell.py) and the bridge
# (firmware/bridge.py) use, through this module only:
#
#   asyncio.core._io_queue      the IOQueue asyncio polls: queue_read /
#                               queue_write (park the current task until a
#                               socket is readable / writable: readable(),
#                               writable()), its `poller` (select.poll:
#                               watch(), unwatch()), its `map` (id(stream) ->
#                               [task waiting to read, task waiting to write,
#                               stream]) and _dequeue; install() puts an
#                               IOQueue of ours in its place
#   asyncio.core._task_queue    push(task): wake a task whose wait is over;
#                               remove(task) (wake(): a sleep cut short)
#   a Task's data and ph_key    wake(): what it waits on (None: a sleep), until when
#   asyncio.core.IOQueue        the class of ours extends it
#
# Those of MicroPython 1.28 (the boards' images) and 1.29 (the tests).
# tests/host/test_firmware_poller.py lists them and fails, naming them,
# if the asyncio the firmware runs on (the venv's MicroPython) lacks any,
# and if any other module of the firmware uses asyncio's internals. There
# is no fallback: on an asyncio without IOQueue, install() stops the
# start with an AttributeError rather than serve on a poller that never
# wakes. (The 32-bit wasm port, where the firmware is only measured, has an
# asyncio of its own without them: nothing is installed there.)
#
# The slots' poller. A client socket stays in asyncio's own poller from
# the accept to the close (watch/unwatch, not once per read as
# Stream.readinto would): the installed IOQueue notes which slots the poll
# found readable and has each of them read right after the poll, inside
# the event loop, in slot order (a read may close or pause another slot: a
# session taken over, which must not change the poller under the poll's
# iteration). Every other socket the poll names is asyncio's own wait (the
# listener, a drain, a bridge, the MQTT-SN socket of firmware/sn.py), woken
# as IOQueue.wait_io_event does.

import asyncio
import select
import time


def readable(sock):
    """An awaitable: park the current task until `sock` is readable."""
    yield asyncio.core._io_queue.queue_read(sock)


def writable(sock):
    """An awaitable: park the current task until `sock` is writable (its connect done)."""
    yield asyncio.core._io_queue.queue_write(sock)


def wake(task):
    """Run `task`, asleep in asyncio.sleep_ms, now: what Task.cancel does
    to a sleeping task, without the CancelledError, and also while
    MicroPython still names the task current (its asyncio keeps the last
    task run as current while the loop polls, and cancel then refuses:
    "can't cancel self"; seen on the Pico W image when a read woke the
    clock). A task running, or waiting on anything but its sleep (data
    set), or due already, is left alone."""
    if task.data is None and time.ticks_diff(task.ph_key, time.ticks_ms()) > 0:
        queue = asyncio.core._task_queue
        queue.remove(task)
        queue.push(task)


def watch(sock):
    """Keep `sock` in asyncio's poller, for reading (a slot: see above)."""
    asyncio.core._io_queue.poller.register(sock, select.POLLIN)


def unwatch(sock):
    asyncio.core._io_queue.poller.unregister(sock)


def install(slots, read):
    """Put the slots' poller in place of asyncio's I/O queue (once per
    process): `slots`, objects with `sock`, `polled` (watched) and `ready`;
    `read(slot)` reads a slot the poll found readable."""
    core = asyncio.core  # (an asyncio without IOQueue stops here: AttributeError)
    io = core._io_queue
    if getattr(io, "slots", None) is not None:
        io.slots = slots  # installed by an earlier server in this process
        io.read = read
        return

    class SlotPoller(core.IOQueue):
        def wait_io_event(self, dt):
            slots = self.slots
            task_queue = core._task_queue
            for s, ev in self.poller.ipoll(dt):
                for slot in slots:
                    if slot.sock is s and slot.polled:
                        slot.ready = True
                        break
                else:
                    # asyncio's own wait (the listener, a drain, a bridge).
                    sm = self.map[id(s)]
                    if ev & ~select.POLLOUT and sm[0] is not None:
                        task_queue.push(sm[0])
                        sm[0] = None
                    if ev & ~select.POLLIN and sm[1] is not None:
                        task_queue.push(sm[1])
                        sm[1] = None
                    if sm[0] is None and sm[1] is None:
                        self._dequeue(s)
                    elif sm[0] is None:
                        self.poller.modify(s, select.POLLOUT)
                    else:
                        self.poller.modify(s, select.POLLIN)
            for slot in slots:
                if slot.ready:
                    slot.ready = False
                    self.read(slot)

    poller = SlotPoller()  # (its own poll object and map are dropped at once)
    poller.poller = io.poller
    poller.map = io.map
    poller.slots = slots
    poller.read = read
    core._io_queue = poller
