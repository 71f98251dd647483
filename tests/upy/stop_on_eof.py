# A firmware main (argv[1]: a main.py, or "-m" for the image's frozen main)
# run so that closing this process's stdin stops it the way Ctrl-C does: a
# KeyboardInterrupt out of the serving asyncio.run, into firmware/app.py's
# graceful stop.
#
#   micropython -X heapsize=HEAP tests/upy/stop_on_eof.py firmware/main.py --config siskin.json
#
# Why not SIGINT (tests/host/upy_broker_proc.py): the unix port raises the
# KeyboardInterrupt of a SIGINT from inside the signal handler
# (MICROPY_ASYNC_KBD_INTR), wherever the C code is. Caught holding the qstr
# mutex (a str iterated char by char while a disconnect is logged), the
# longjmp leaves it locked and the next new qstr waits forever: 2 stops in
# 20 hung that way. Here the KeyboardInterrupt is raised by a task, between
# bytecodes, as a board's Ctrl-C is.

import asyncio
import sys

_run = asyncio.run


async def _until_eof():
    stdin = asyncio.StreamReader(sys.stdin)
    while await stdin.read(64):
        pass
    raise KeyboardInterrupt  # not an Exception: it leaves asyncio.run at once


def _watched_run(main):
    asyncio.run = _run  # once: the graceful stop's own asyncio.run is not watched

    async def watched():
        watcher = asyncio.create_task(_until_eof())
        try:
            return await main
        finally:
            watcher.cancel()

    return _run(watched())


asyncio.run = _watched_run
main = sys.argv.pop(1)
if main == "-m":
    import main  # (the image's frozen main.py runs on import)
else:
    with open(main) as f:
        source = f.read()
    exec(source, {"__name__": "__main__", "__file__": main})
