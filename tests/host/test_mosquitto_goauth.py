"""mosquitto-go-auth's jwt and http backends in a mosquitto.conf: converted
by `siskin convert-mosquitto-conf` to [security.jwt] / [security.http]
(cpython_host/mosquitto/goauth.py), served by `siskin --mosquitto-conf`
with real clients (paho, a JWT in the user name as go-auth takes it; an
HTTP auth service of the standard library answering go-auth's json), and
what cannot be honoured refused with its line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from common.broker.settings import ConfigError
from cpython_host.mosquitto.conf import convert, to_toml
from tests.host.broker_proc import run_cli
from tests.host.test_http_auth import AuthServer
from tests.host.test_jwt_login import token
from tests.host.test_mosquitto_conf import answer, running, write
from tests.host.upy_broker_proc import free_port

SECRET = "a go-auth jwt secret of 32+ bytes!!"


def goauth_conf(port: int, *lines: str) -> str:
    return (
        f"listener {port} 127.0.0.1\nallow_anonymous false\nlog_type all\n"
        "auth_plugin /usr/lib/mosquitto-go-auth/go-auth.so\n"
        "auth_opt_log_level debug\nauth_opt_cache true\n" + "".join(line + "\n" for line in lines)
    )


JWT_LINES = (
    "auth_opt_backends jwt",
    "auth_opt_jwt_mode local",
    f"auth_opt_jwt_secret {SECRET}",
    "auth_opt_jwt_userfield Username",
)


def test_jwt_local_is_converted_and_served(tmp_path: Path) -> None:
    port = free_port()
    conf = write(tmp_path / "mosquitto.conf", goauth_conf(port, *JWT_LINES))
    conv = convert(str(conf))
    jwt = conv.doc["security"]["jwt"]
    assert jwt == {"secret": SECRET, "token_in": "username", "require_exp": False, "user_claim": "username"}
    text = to_toml(conv, str(conf))
    assert "[security.jwt]" in text and 'token_in = "username"' in text
    assert any("'auth_opt_log_level' has no Siskin setting" in n for n in conv.notes)
    log = tmp_path / "siskin.log"
    with running([sys.executable, "-m", "cpython_host", "--mosquitto-conf", str(conf)], port, log):
        good = token({"username": "dev7", "exp": int(time.time()) + 300}, key=SECRET.encode())
        assert answer(port, "dev7", user=good, password="any") == "Success"  # as go-auth: the token is the user name
        bad = token({"username": "dev7"}, key=b"another secret of at least 32 bytes")
        assert answer(port, "dev7", user=bad, password="any") == "Bad user name or password"
    # The TOML the command prints loads and starts the same way.
    proc = run_cli("convert-mosquitto-conf", str(conf))
    assert proc.returncode == 0 and "[security.jwt]" in proc.stdout, proc.stderr


def test_http_is_converted_and_served(tmp_path: Path) -> None:
    auth = AuthServer()
    try:
        port = free_port()
        lines = (
            "auth_opt_backends http",
            "auth_opt_http_host 127.0.0.1",
            f"auth_opt_http_port {auth.port}",
            "auth_opt_http_getuser_uri /mqtt/auth",
            "auth_opt_http_response_mode json",
            "auth_opt_http_params_mode json",
            "auth_opt_http_timeout 2",
            "auth_opt_auth_cache_seconds 30",
        )
        conf = write(tmp_path / "mosquitto.conf", goauth_conf(port, *lines))
        hook = convert(str(conf)).doc["security"]["http"]
        assert hook == {
            "url": f"http://127.0.0.1:{auth.port}/mqtt/auth",
            "timeout": 2.0,
            "response": "json",
            "cache_ttl": 30,
        }
        log = tmp_path / "siskin.log"
        with running([sys.executable, "-m", "cpython_host", "--mosquitto-conf", str(conf)], port, log):
            assert answer(port, "c1", "alice", "wonderland") == "Success"
            assert answer(port, "c2", "alice", "nope") == "Bad user name or password"
    finally:
        auth.stop()


@pytest.mark.parametrize(
    "lines, message",
    [
        (("auth_opt_backends postgres",), "go-auth's postgres backend has no Siskin counterpart"),
        (("auth_opt_backends jwt", "auth_opt_jwt_mode remote"), "only local mode"),
        ((*JWT_LINES, "auth_opt_jwt_userquery select 1"), "Siskin looks nothing up in a database"),
        ((*JWT_LINES, "auth_opt_jwt_skip_user_expiration true"), "always enforces a token's exp"),
        (
            (
                "auth_opt_backends http",
                "auth_opt_http_host h",
                "auth_opt_http_port 80",
                "auth_opt_http_getuser_uri /u",
                "auth_opt_http_aclcheck_uri /acl",
            ),
            "Siskin does not ask per topic",
        ),
        (
            (
                "auth_opt_backends http",
                "auth_opt_http_host h",
                "auth_opt_http_port 80",
                "auth_opt_http_getuser_uri /u",
                "auth_opt_http_response_mode text",
            ),
            "Siskin reads status or json answers",
        ),
        (
            (
                "auth_opt_backends jwt",
                "auth_opt_jwt_mode local",
                f"auth_opt_jwt_secret {SECRET}",
                "auth_opt_files_path /x",
            ),
            "'auth_opt_files_path' is not supported",
        ),
    ],
)
def test_what_cannot_be_honoured_is_refused(tmp_path: Path, lines: tuple[str, ...], message: str) -> None:
    conf = write(tmp_path / "mosquitto.conf", goauth_conf(1883, *lines))
    with pytest.raises(ConfigError, match=message):
        convert(str(conf))


def test_other_plugins_are_still_refused(tmp_path: Path) -> None:
    conf = write(tmp_path / "mosquitto.conf", "listener 1883\nauth_plugin /usr/lib/auth-plug.so\n")
    with pytest.raises(
        ConfigError, match=r":2: 'auth_plugin' is not supported: /usr/lib/auth-plug.so: Siskin loads no plugins"
    ):
        convert(str(conf))
