# The firmware's graceful stop (Server.stop: a stop request, Ctrl-C at the
# REPL, SIGINT on the unix port): the bridges and the shell's tasks
# stopped, the listener closed, the MQTT-SN port no longer read, then the
# core's shutdown (common/driver.py: v5 clients hear DISCONNECT 0x8B, every
# connection closed, the store synced) and up to shutdown_timeout for the
# connections to close; the rest are aborted. Loaded when the stop begins:
# a serving board keeps none of this code.

import asyncio
import time


async def stop(server, reason):
    driver = server.driver
    server.log.log(20, "shutting down (%s): %d connection(s)" % (reason, driver.open))
    started = time.ticks_ms()
    for runner in server.bridge_runners:
        runner.stop()
    for task in (server.accept_task, server.clock_task, server.uplink_task):
        if task is not None and task is not asyncio.current_task():
            task.cancel()
    if server.lsock is not None:
        server.lsock.close()
        server.lsock = None
    if server.sn is not None:
        server.sn.stop_reading()  # (its pumping goes on: the SN clients' connections end below)
    deadline = time.ticks_add(started, driver.shutdown())
    while driver.open and time.ticks_diff(deadline, time.ticks_ms()) > 0:
        await asyncio.sleep_ms(50)
        driver.tick()  # ends the lingers
    driver.abort_all()
    if server.sn is not None:
        server.sn.stop()
    server.log.log(20, "shutdown complete in %d ms" % time.ticks_diff(time.ticks_ms(), started))
