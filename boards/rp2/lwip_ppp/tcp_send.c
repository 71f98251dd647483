// A socket write that lwIP queued is a write that succeeded (a user C
// module of Siskin's rp2 images: micropython.cmake).
//
// MicroPython 1.28's socket write (extmod/modlwip.c, lwip_tcp_send) queues
// the data with tcp_write() and then sends with tcp_output(), and returns
// tcp_output()'s error as the write's: OSError, though the data is queued
// and lwIP sends it later (a segment the interface could not take stays
// queued, and lwIP's timers send it again). Over PPP the interface fails
// now and then: the UART's write gives up when its TX ring stays full
// (lwIP's ERR_IF, docs/boards.md "The real image on a wire"), and the
// firmware took the OSError for a dead connection and closed a client in
// the middle of a QoS 0 burst. So, with the linker's --wrap, tcp_output()
// right after a tcp_write() that succeeded on the same connection answers
// ERR_OK. A tcp_write() that failed (ERR_MEM: lwIP's heap is full) keeps
// its error, as does the tcp_output() after it: nothing was queued, and the
// write raises as before. tcp_output() is called by other parts of lwIP too,
// which ignore its answer or, once (the persist timer), only retry sooner.

#include "py/runtime.h"

typedef signed char err_t_;  // (lwIP's err_t: s8_t)

err_t_ __real_tcp_write(void *pcb, const void *data, unsigned short len, unsigned char flags);
err_t_ __real_tcp_output(void *pcb);

static void *written;  // the connection of the last tcp_write() that succeeded, until its tcp_output()

err_t_ __wrap_tcp_write(void *pcb, const void *data, unsigned short len, unsigned char flags) {
    err_t_ err = __real_tcp_write(pcb, data, len, flags);
    written = err == 0 ? pcb : NULL;
    return err;
}

err_t_ __wrap_tcp_output(void *pcb) {
    err_t_ err = __real_tcp_output(pcb);
    if (pcb == written) {
        written = NULL;
        return 0;  // queued: lwIP sends it when the interface takes it
    }
    return err;
}
