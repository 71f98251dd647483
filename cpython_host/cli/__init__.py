"""The `siskin` command's subcommands, one module each.

Every module here has `main(argv) -> int` (argv without the subcommand's
name) and builds its own argparse parser, so `siskin NAME --help` teaches
that command alone and its options go after its name. COMMANDS is the one
list of them: cpython_host/__main__.py dispatches by it and `siskin --help`
lists it. A new subcommand is a module here and a row below.
"""

from __future__ import annotations

# (name, module in cpython_host.cli, usage after the name, what it does)
COMMANDS: tuple[tuple[str, str, str, str], ...] = (
    ("serve", "serve", "[OPTIONS]", "run the broker (as `siskin [OPTIONS]`)"),
    ("passwd", "passwd", "[-c | -D] FILE USER", "add, change (-c: new file) or delete (-D) a user"),
    ("ctl", "ctl", "COMMAND", "look at and act on a running broker (clients, kick, ...)"),
    ("cert", "cert", "[-o DIR] [--name NAME] [--ip ADDR]", "a self-signed TLS certificate for this gateway"),
    ("convert-mosquitto-conf", "convert_mosquitto_conf", "FILE [-o OUT]", "a mosquitto.conf as Siskin TOML"),
    ("import-mosquitto-db", "import_mosquitto_db", "FILE --data-dir DIR", "Mosquitto's mosquitto.db into a store"),
    ("scram-user", "scram_user", "NAME", "print a [limits] scram_users line (v5 SCRAM-SHA-256)"),
    ("store-key", "store_key", "", "print a fresh AES-256 store key (keep it secret)"),
)


def summary() -> str:
    """The subcommands as `siskin --help` lists them."""
    width = max(len(f"siskin {name} {usage}") for name, _, usage, _ in COMMANDS)
    return "\n".join(f"  {f'siskin {name} {usage}'.ljust(width)}  {what}" for name, _, usage, what in COMMANDS)
