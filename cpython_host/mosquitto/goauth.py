"""mosquitto-go-auth's options in a mosquitto.conf, as Siskin settings
(cpython_host/mosquitto/conf.py hands it `auth_plugin` and every `auth_opt_*`
line, then calls finish()).

Theory of operation. go-auth (archived in 2025) is configured by
`auth_plugin /path/go-auth.so`, `auth_opt_backends jwt, http, ...` and one
`auth_opt_<backend>_<option>` line per option. Two of its backends have a
Siskin counterpart, and are converted:

- `jwt` with `auth_opt_jwt_mode local`: tokens verified with
  `auth_opt_jwt_secret` (HMAC) -> [security.jwt] with `secret` (inline, as
  go-auth had it), `token_in = "username"` (go-auth takes the token in the
  user name), `user_claim` "sub" (or "username" with
  `auth_opt_jwt_userfield Username`), `require_exp = false` (go-auth checks
  exp only when the token has one). Its DB lookups (`jwt_userquery`,
  `jwt_aclquery`) have no Siskin counterpart: refused (the token's user
  would be let in without the lookup; --ignore-unsupported takes that).
- `http`: `http_host`, `http_port`, `http_getuser_uri`, `http_with_tls` ->
  [security.http] url; `http_timeout` -> timeout; `http_response_mode`
  status or json (go-auth's {"Ok": ...}, which Siskin reads) -> response;
  `auth_opt_auth_cache_seconds` -> cache_ttl. Per-topic checks
  (`http_aclcheck_uri`) are not asked by Siskin: refused (an ACL the
  converted broker would not apply), likewise `text` answers, `form`
  parameters and methods other than POST.

Any other backend, mode or option is refused with its line, as every
unsupported Mosquitto option is (mosquitto_conf.py: --ignore-unsupported
goes on and lists them). Options about go-auth itself (log level, cache
type and jitter, hashing) are noted.
"""

from __future__ import annotations

from typing import Any

# Options about the plugin itself: nothing to set in Siskin.
NOTED = {
    "log_level": "Siskin's [log] level applies",
    "log_dest": "Siskin logs to its own log",
    "cache": "Siskin's HTTP hook always caches (cache_ttl, negative_ttl); a JWT needs no cache",
    "cache_type": "Siskin's cache is in memory",
    "cache_reset": "Siskin's cache starts empty",
    "cache_refresh": "Siskin's cache entries live cache_ttl",
    "auth_jitter_seconds": "no jitter: entries live cache_ttl",
    "acl_cache_seconds": "Siskin asks no per-topic checks",
    "acl_jitter_seconds": "Siskin asks no per-topic checks",
    "jwt_user_agent": "Siskin sends its own User-Agent-less request",
    "http_user_agent": "Siskin's request has no User-Agent",
    "retry_count": "a failed check is not retried: it is a 'no answer' (offline_grace)",
    "hasher": "no passwords are hashed by these backends",
    "disable_superuser": "Siskin has no superusers",
    "jwt_superuser_uri": "Siskin has no superusers",
    "http_superuser_uri": "Siskin has no superusers",
    "http_verify_peer": "https:// is always verified against the system's CAs",
    "http_params_mode": "Siskin sends JSON",
}


class GoAuth:
    """What the go-auth lines of one mosquitto.conf say."""

    def __init__(self) -> None:
        self.plugin: tuple[str, str] | None = None  # (where, path)
        self.where = ""  # the auth_plugin line
        self.opts: dict[str, tuple[str, str]] = {}  # option (without auth_opt_) -> (where, value)

    def option(self, reader: Any, option: str, args: list[str]) -> None:
        value = " ".join(args)
        if option == "auth_plugin":
            self.plugin = (reader.where, value)
        else:
            self.opts[option[len("auth_opt_") :]] = (reader.where, value)

    def finish(self, reader: Any) -> None:
        """Fill reader.security's jwt / http tables; refuse what cannot be honoured."""
        if self.plugin is None:
            if self.opts:
                where = next(iter(self.opts.values()))[0]
                _refuse(reader, where, "auth_opt_*", "no auth_plugin line: these options belong to a plugin")
            return
        where, path = self.plugin
        self.where = where
        backends = [b.strip() for b in self.opts.pop("backends", (where, ""))[1].split(",") if b.strip()]
        if not backends:
            _refuse(
                reader,
                where,
                "auth_plugin",
                f"{path}: Siskin loads no plugins (mosquitto-go-auth's jwt and http backends are converted; no auth_opt_backends here)",
            )
            return
        reader.out.notes.append(
            f"{where}: auth_plugin {path} (mosquitto-go-auth, backends {', '.join(backends)}): converted below"
        )
        for backend in backends:
            if backend == "jwt":
                self._jwt(reader)
            elif backend == "http":
                self._http(reader)
            else:
                _refuse(
                    reader,
                    where,
                    "auth_opt_backends",
                    f"go-auth's {backend} backend has no Siskin counterpart (jwt and http do)",
                )
        for name, (at, _value) in self.opts.items():
            if name in NOTED:
                reader.out.notes.append(f"{at}: 'auth_opt_{name}' has no Siskin setting: {NOTED[name]}")
            else:
                _refuse(reader, at, f"auth_opt_{name}", "no Siskin counterpart")

    def _take(self, name: str, default: str | None = None) -> tuple[str, str | None]:
        where, value = self.opts.pop(name, ("", default))
        return where, value

    def _jwt(self, reader: Any) -> None:
        at, mode = self._take("jwt_mode")
        if mode != "local":
            _refuse(
                reader,
                at or self.where,
                "auth_opt_jwt_mode",
                f"{mode or 'not set'}: only local mode (tokens checked with jwt_secret) is converted",
            )
            return
        at, secret = self._take("jwt_secret")
        if not secret:
            _refuse(reader, at or self.where, "auth_opt_jwt_secret", "local mode needs the secret")
            return
        jwt: dict[str, Any] = {"secret": secret, "token_in": "username", "require_exp": False}
        _, field = self._take("jwt_userfield", "Subject")
        jwt["user_claim"] = "username" if field == "Username" else "sub"
        for name in ("jwt_userquery", "jwt_aclquery"):
            at, value = self._take(name)
            if value is not None:
                _refuse(
                    reader,
                    at,
                    f"auth_opt_{name}",
                    "Siskin looks nothing up in a database: a valid token's user is let in (and the token's acl claim, or acl_file, gives its rules)",
                )
        for name in list(self.opts):
            if name.startswith(("jwt_pg_", "jwt_mysql_")) or name == "jwt_db":
                at, _ = self.opts.pop(name)
                _refuse(reader, at, f"auth_opt_{name}", "Siskin looks nothing up in a database")
        at, skip = self._take("jwt_skip_user_expiration")
        if skip == "true":
            _refuse(
                reader,
                at,
                "auth_opt_jwt_skip_user_expiration",
                "Siskin always enforces a token's exp, during the session too",
            )
        self._take("jwt_skip_acl_expiration")
        reader.security["jwt"] = jwt
        if len(secret.encode()) < 32:
            reader.out.notes.append(
                f"{at}: jwt_secret of {len(secret.encode())} bytes: Siskin wants at least 32 (RFC 7518); make a longer one"
            )

    def _http(self, reader: Any) -> None:
        where = self.where
        _, host = self._take("http_host")
        _, port = self._take("http_port")
        at, uri = self._take("http_getuser_uri")
        if not host or not port or not uri:
            _refuse(
                reader,
                at or where,
                "auth_opt_http_getuser_uri",
                "the http backend needs http_host, http_port and http_getuser_uri",
            )
            return
        _, tls = self._take("http_with_tls", "false")
        hook: dict[str, Any] = {"url": f"{'https' if tls == 'true' else 'http'}://{host}:{port}{uri}"}
        at, timeout = self._take("http_timeout")
        if timeout is not None:
            if _number(timeout):
                hook["timeout"] = float(timeout)
            else:
                _refuse(reader, at, "auth_opt_http_timeout", f"{timeout!r} is not a number")
        at, mode = self._take("http_response_mode", "status")
        if mode in ("status", "json"):
            hook["response"] = mode
        else:
            _refuse(reader, at, "auth_opt_http_response_mode", f"{mode}: Siskin reads status or json answers")
        at, params = self._take("http_params_mode", "json")
        if params != "json":
            _refuse(reader, at, "auth_opt_http_params_mode", f"{params}: Siskin sends JSON")
        at, method = self._take("http_method", "POST")
        if method != "POST":
            _refuse(reader, at, "auth_opt_http_method", f"{method}: Siskin POSTs")
        at, acl = self._take("http_aclcheck_uri")
        if acl is not None:
            _refuse(
                reader,
                at,
                "auth_opt_http_aclcheck_uri",
                "Siskin does not ask per topic: the CONNECT answer may carry the client's acl, or use acl_file",
            )
        at, seconds = self._take("auth_cache_seconds")
        if seconds is not None and _number(seconds):
            hook["cache_ttl"] = int(float(seconds))
        reader.security["http"] = hook


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _refuse(reader: Any, where: str, option: str, why: str) -> None:
    reader.where = where
    reader.unsupported(option, why)
