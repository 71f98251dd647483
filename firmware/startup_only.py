# The modules that run only while the firmware starts: firmware/app.py
# build() unloads them after it (common.compat.unload), so that their code
# does not stay in a board's heap (docs/boards.md, "What the code takes").
# The one list: tests/host/test_mpy_cross.py checks that a default start-up
# leaves none of them loaded and that docs/boards.md names them all.

STARTUP_ONLY = (
    "firmware.startup_only",  # this list
    "firmware.startup",  # the start-up itself: config, board file, store
    "common.startup",  # the core's start-up both shells run
    "firmware.boardcfg",  # the config readers
    "firmware.storage",  # the store's opener
    "common.store.storeboot",
    "common.store.store_open",  # the reading side of the store
    "common.store.filelog_open",  # the log's scan
    "common.broker.settings",  # the config schema and its checks (limits.py stays)
    "common.broker.security_files",  # the users and ACL files' reader
    "common.broker.broker_setup",  # a Broker's set-up: its attributes and parts (made once)
    "common.broker.stats_counters",  # the counters' names: read to make the Stats (and by $SYS)
    "common.uplink.settings",  # the "ppp" uplink's schema (firmware/boardcfg.py, only with "ppp")
    "siskin_boards",  # the image's built-in board files (firmware/boardcfg.py)
)
