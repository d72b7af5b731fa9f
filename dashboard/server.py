"""Serving the Dash app to a team: waitress (a production WSGI server) in front, a login in between.

Why waitress: it is a pure-Python, thread-pooled production WSGI server with no C build and no
fork model, so it runs wherever commbench runs (the CPU-only CI machines, a login node, a laptop)
and shuts down cleanly; the app is I/O- and DuckDB-bound, which threads serve well. gunicorn
would add a pre-fork process model that Dash's per-process caches do not need, and does not run
on every platform. Flask's development server is single-purpose (debugging) and says so itself:
it is used only with --debug.

Authentication (AuthMiddleware): credentials come from a file (--auth-file) or the environment
variable AUTH_ENV, never from the command line, where `ps` and shell history would show them. The
file or variable holds one line:
  user:password   HTTP basic auth with that user and password;
  a token         (no colon) `Authorization: Bearer <token>`, or basic auth with any user name and
                  the token as password (what a browser's login box sends).
Every request without them is answered 401 with a basic-auth challenge; comparisons are
constant-time. The app only reads: no page writes to the results folder or the database.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import waitress

from commbench.errors import UsageError

AUTH_ENV = "COMMBENCH_DASHBOARD_AUTH"
REALM = "commbench"
THREADS = 8  # waitress worker threads: a team's browsers and their callbacks at once


@dataclass(frozen=True)
class Credentials:
    user: str | None  # None: a token
    secret: str
    source: str  # where they came from, for the startup line (never the secret itself)

    def accepts(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and self.user is None:
            return _same(value.strip(), self.secret)
        if scheme != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if self.user is None:
            return _same(password, self.secret)
        return _same(user, self.user) & _same(password, self.secret)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def parse_credentials(text: str, source: str) -> Credentials:
    line = text.strip()
    if not line or "\n" in line:
        raise UsageError(f"{source}: give one line, 'user:password' or a token")
    user, colon, password = line.partition(":")
    if colon:
        if not user or not password:
            raise UsageError(f"{source}: 'user:password' needs both a user and a password")
        return Credentials(user, password, source)
    if len(line) < 16:
        raise UsageError(f"{source}: a token must be at least 16 characters (e.g. `openssl rand -hex 16`)")
    return Credentials(None, line, source)


def load_credentials(auth_file: str | None, environ=os.environ) -> tuple[Credentials | None, list[str]]:
    """Credentials from --auth-file, else $COMMBENCH_DASHBOARD_AUTH, else None; and warnings."""
    if auth_file:
        from commbench.data.safe_read import TEXT, read_text

        path = Path(auth_file)
        text = read_text(path, TEXT)
        mode = path.stat().st_mode
        warnings = [f"{path}: readable by other users (chmod 600 it)"] if mode & (stat.S_IRWXG | stat.S_IRWXO) else []
        return parse_credentials(text, str(path)), warnings
    if environ.get(AUTH_ENV):
        return parse_credentials(environ[AUTH_ENV], f"${AUTH_ENV}"), []
    return None, []


class AuthMiddleware:
    """WSGI: pass requests carrying the credentials to the app, answer 401 to every other one."""

    def __init__(self, app, credentials: Credentials):
        self.app = app
        self.credentials = credentials

    def __call__(self, environ, start_response):
        if self.credentials.accepts(environ.get("HTTP_AUTHORIZATION")):
            return self.app(environ, start_response)
        body = b"commbench dashboard: log in (HTTP basic auth, or a bearer token)\n"
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
            ],
        )
        return [body]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def warm_up(dash_app) -> None:
    """Let Dash build its callback map before the first real request. Dash builds it on the first
    request it serves; under a threaded server the first requests of a burst arrive together and
    some find it half built ("Callback function not found", a 500). Measured: 62 of 96 callback
    requests from 16 threads at once failed on a fresh app, none after one request first."""
    dash_app.server.test_client().get("/_dash-dependencies")


def protect(flask_app, credentials: Credentials | None) -> None:
    """Put the login in front of the Flask app's WSGI callable (for waitress and the dev server alike)."""
    if credentials is not None:
        flask_app.wsgi_app = AuthMiddleware(flask_app.wsgi_app, credentials)


def serve(flask_app, host: str, port: int, threads: int = THREADS) -> None:
    """Serve until interrupted, under waitress."""
    waitress.serve(flask_app, host=host, port=port, threads=threads, ident="commbench", _quiet=True)
