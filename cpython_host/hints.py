"""What to do about an OS error at start-up: the hint that follows its message.

An operator who reads "Address already in use" or "Permission denied" wants
to know who holds the port and which user needs which right, not errno.
Each function returns a hint (a sentence) or "" when there is nothing
useful to add; the caller prints it after the error it already names.
"""

from __future__ import annotations

import errno
import os
import pwd
import sys

MQTT_PORT_SETTING = "--port, [[listener]] port"


def explain_listen_failure(err: OSError, port: int, setting: str = MQTT_PORT_SETTING) -> None:
    """Add to `err`'s text why a listener could not open on `port`, and what to do;
    `setting`: where that listener's port is set."""
    hint = listen_failed(err, port, setting)
    if hint:
        err.strerror = f"{err.strerror}; {hint}"


def listen_failed(err: OSError, port: int, setting: str = MQTT_PORT_SETTING) -> str:
    """Why a listener could not open on `port`, and what to do ("" if nothing useful)."""
    if err.errno == errno.EADDRINUSE:
        holder = port_holder(port)
        who = f"{holder} listens on port {port}" if holder else f"another program listens on port {port}"
        return (
            f"{who} (a Mosquitto or another Siskin still running? `ss -ltnp 'sport = :{port}'` names it; "
            f"`systemctl stop mosquitto` stops Debian's); or choose another port ({setting})"
        )
    if err.errno == errno.EACCES and 0 < port < 1024:
        return (
            f"port {port} is below 1024: only root or a process with CAP_NET_BIND_SERVICE may listen there "
            "(contrib/systemd/siskin.service has the two lines to give it), or use 1883/8883"
        )
    if err.errno == errno.EADDRNOTAVAIL:
        return "no interface of this machine has that address (`ip -br addr` lists them; 0.0.0.0 = all of them)"
    return ""


def port_holder(port: int) -> str:
    """ "mosquitto (pid 812)" for the process listening on TCP `port`, found through /proc
    (Linux); "" when it cannot be seen (another user's process, without root)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)  # the header
                for line in f:
                    fields = line.split()
                    # local_address is ADDR:PORT in hex; state 0A is LISTEN.
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                        inodes.add(f"socket:[{fields[9]}]")
        except (OSError, IndexError, ValueError, StopIteration):
            continue
    if not inodes:
        return ""
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                with open(f"/proc/{pid}/comm") as f:
                    return f"{f.read().strip()} (pid {pid})"
        except OSError:  # gone, or not ours to look at
            continue
    return ""


def cannot_write(err: OSError, path: str) -> str:
    """For a data directory this process may not write: which user it runs as, and the fix."""
    if err.errno == errno.EROFS:
        return (
            "the file system is read-only here (under systemd's ProtectSystem=strict only the unit's "
            "StateDirectory, /var/lib/siskin, is writable)"
        )
    if err.errno not in (errno.EACCES, errno.EPERM):
        return ""
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    fix = f"sudo chown -R {user}: {path}" if os.path.isdir(path) else f"sudo install -d -o {user} -m 700 {path}"
    return f"Siskin runs as the user {user} (uid {uid}), who may not write there: `{fix}`"


def install_advice(package: str, debian_package: str) -> str:
    """How to add the Python `package` to the Python this siskin runs on: pipx's
    inject into its own pipx home (PIPX_HOME, PIPX_BIN_DIR as installed), its
    virtual environment's pip, or the system's package."""
    prefix = os.path.abspath(sys.prefix)
    venvs, name = os.path.split(prefix)
    if os.path.basename(venvs) == "venvs":  # pipx: PIPX_HOME/venvs/NAME
        home = os.path.dirname(venvs)
        import shutil  # (only here: it brings bz2 and lzma with it)

        # (the command as run: pipx's link in PIPX_BIN_DIR)
        command = sys.argv[0] if os.path.basename(sys.argv[0]) == "siskin" else shutil.which("siskin")
        bin_dir = f" PIPX_BIN_DIR={os.path.dirname(command)}" if command else ""
        sudo = "" if os.access(prefix, os.W_OK) else "sudo "
        return f"{sudo}PIPX_HOME={home}{bin_dir} pipx inject {name} {package} (this siskin is pipx's, in {prefix})"
    if sys.prefix != sys.base_prefix:
        return f"{prefix}/bin/pip install {package} (this siskin runs in the virtual environment {prefix})"
    return f"sudo apt install {debian_package} (Debian, Raspberry Pi OS), or pip install {package}"
