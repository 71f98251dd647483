"""The runtime: the start-up that runs it all (run), SIGHUP's reload, PyPy's warm-up, the POSIX store."""
