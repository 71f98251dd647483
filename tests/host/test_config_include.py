"""`include_dir` in the host's TOML (what Mosquitto's include_dir gives its
users: a conf.d of fragments, one per listener, bridge or site policy):
the fragments join the main file in sorted order, a key set twice is
refused with both files named, and the real broker serves what a fragment
says, re-read on SIGHUP."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from common.broker.settings import ConfigError
from cpython_host.config import load_config, load_security
from tests.host.broker_proc import BrokerProcess, RawClient, wait_until
from tests.host.test_server_security import siskin_passwd

MAIN = """\
include_dir = "conf.d"

[limits]
max_connections = 50

[[listener]]
port = 0
"""


def site(tmp_path: Path, fragments: dict[str, str], main: str = MAIN) -> Path:
    (tmp_path / "conf.d").mkdir()
    for name, text in fragments.items():
        (tmp_path / "conf.d" / name).write_text(text)
    path = tmp_path / "siskin.toml"
    path.write_text(main)
    return path


def test_fragments_join_the_main_file_in_sorted_order(tmp_path: Path) -> None:
    path = site(
        tmp_path,
        {
            "20-bridge.toml": '[[bridge]]\nname = "up"\naddresses = ["127.0.0.1:1"]\n'
            '[[bridge.topic]]\npattern = "a/#"\ndirection = "out"\n',
            "10-net.toml": '[[listener]]\nport = 0\nhost = "127.0.0.2"\n[limits]\nmax_inflight = 7\n',
            "30-security.toml": '[security]\npassword_file = "users"\nallow_anonymous = false\n',
            "notes.txt": "not a fragment: [limits] max_inflight = 1\n",
        },
    )
    cfg = load_config(str(path))
    assert [lst.host for lst in cfg.listeners()] == ["127.0.0.1", "127.0.0.2"]  # the main file's first
    assert cfg.settings.max_connections == 50 and cfg.settings.max_inflight == 7
    assert [b.name for b in cfg.bridges] == ["up"]
    # A relative name in a fragment is taken from the main file's directory.
    siskin_passwd(tmp_path / "users", "alice", "wonderland", "-c")
    users, _, anonymous, _ = load_security(cfg)
    assert users is not None and anonymous is False


def test_a_key_set_twice_names_both_files(tmp_path: Path) -> None:
    path = site(tmp_path, {"10-a.toml": "[limits]\nmax_inflight = 7\n", "20-b.toml": "[limits]\nmax_inflight = 9\n"})
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    text = str(e.value)
    assert "20-b.toml" in text and "limits.max_inflight" in text and "10-a.toml" in text
    (tmp_path / "conf.d" / "20-b.toml").write_text("[limits]\nmax_connections = 9\n")
    with pytest.raises(ConfigError, match=r"20-b\.toml: limits\.max_connections is set in .*siskin\.toml too"):
        load_config(str(path))


@pytest.mark.parametrize(
    ("fragments", "main", "words"),
    [
        ({}, MAIN.replace('"conf.d"', '"missing.d"'), "is not a directory"),
        ({}, MAIN.replace('"conf.d"', "3"), "include_dir wants a directory name"),
        ({"a.toml": 'include_dir = "more"\n'}, MAIN, "only"),
        ({"a.toml": "[limits\n"}, MAIN, "not valid TOML"),
        (
            {"a.toml": "[limits]\nmax_inflite = 3\n"},
            MAIN,
            r"did you mean 'max_inflight'.* \(with include_dir conf\.d: a\.toml\)",
        ),
    ],
)
def test_a_bad_include_is_one_clear_line(tmp_path: Path, fragments: dict[str, str], main: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_config(str(site(tmp_path, fragments, main)))


def test_the_broker_serves_what_a_fragment_says_and_rereads_it_on_sighup(tmp_path: Path) -> None:
    siskin_passwd(tmp_path / "users", "alice", "wonderland", "-c")
    path = site(tmp_path, {"50-security.toml": '[security]\npassword_file = "users"\nallow_anonymous = false\n'})
    text = path.read_text()
    b = BrokerProcess(tmp_path)  # (writes its own siskin.toml: ours goes over it)
    b.config_path.write_text(text)
    with b:
        assert RawClient(b.port).connect("anon") == b"\x00\x05"  # the fragment's allow_anonymous = false
        assert RawClient(b.port).connect("a", username="alice", password=b"wonderland") == b"\x00\x00"
        (tmp_path / "conf.d" / "50-security.toml").write_text("[security]\nallow_anonymous = true\n")
        b.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: RawClient(b.port).connect("anon2") == b"\x00\x00", 10, "the SIGHUP did not re-read conf.d")
        assert b.stop() == 0
