// lwIP entered from one place at a time on Siskin's rp2 images (a user C
// module of boards/rp2/SISKIN_PICO_W and SISKIN_PICO: micropython.cmake).
//
// MicroPython 1.28's rp2 port runs lwIP from two contexts: thread mode
// (socket calls, under lwip_lock_acquire(), which holds PendSV off) and
// PendSV (lwIP's timers, sys_check_timeouts()). network.PPP breaks that
// rule twice, and a burst of traffic over PPP corrupted lwIP's TCP
// segment lists (found in the emulator, docs/boards.md "The real image on
// a wire"; the chip then looped in tcp_rexmit_rto_prepare() from PendSV
// until the watchdog reset it):
//
// - its input, PPP.poll(), runs from the UART's RX-idle callback with
//   PendSV allowed, so lwIP's timers could run in the middle of
//   pppos_input();
// - its output writes the UART, whose write waits for room in the TX ring
//   (256 B) with mp_event_wait_ms(), which runs scheduled callbacks: that
//   PPP.poll() then ran lwIP's input inside lwIP's output (of a socket
//   write, or of a retransmission from the timers in PendSV).
//
// So, with the linker's --wrap (micropython.cmake): pppos_input() runs
// under the lwIP lock, and while lwIP is entered (the lock held, or the
// timers running) the scheduler is locked, so no callback runs inside it;
// a PPP.poll() scheduled meanwhile runs when lwIP is left. None of these
// functions is called by its own object file, so --wrap reaches every call.

#include "py/runtime.h"

void __real_lwip_lock_acquire(void);
void __real_lwip_lock_release(void);
void __real_pppos_input(void *ppp, const void *data, int len);
void __real_sys_check_timeouts(void);

void __wrap_lwip_lock_acquire(void) {
    __real_lwip_lock_acquire();
    mp_sched_lock();
}

void __wrap_lwip_lock_release(void) {
    mp_sched_unlock();
    __real_lwip_lock_release();
}

void __wrap_pppos_input(void *ppp, const void *data, int len) {
    __wrap_lwip_lock_acquire();
    __real_pppos_input(ppp, data, len);
    __wrap_lwip_lock_release();
}

void __wrap_sys_check_timeouts(void) {
    mp_sched_lock();
    __real_sys_check_timeouts();
    mp_sched_unlock();
}
