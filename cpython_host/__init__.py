"""The CPython host shell of Siskin: asyncio server, CLI, config, $SYS.

`python -m cpython_host` (console script `siskin`) runs the broker; see
docs/host.md. The MQTT logic lives in common/ (the sans-I/O core); this
package only moves bytes and time between real sockets and that core.
"""
