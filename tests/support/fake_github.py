"""A local HTTP server that plays GitHub for the relay's tests, and its `fake_github` fixture.

It implements the endpoints `hud.github` uses (installation lookup, access tokens, dispatches,
check runs, issue comments, re-runs), verifies the credentials it receives exactly as GitHub
would (an RS256 app JWT for `/app/…`, an issued installation token covering the repository for
repo endpoints), records every request, and can be scripted to fail:

    fake_github.install("org/backend")                       # the app is installed there
    fake_github.enqueue("POST", "/repos/*/dispatches", Canned.server_error(502), times=2)
    fake_github.enqueue("POST", "/repos/*/check-runs", Canned.secondary_rate_limit(30))
    fake_github.enqueue("GET", "/repos/*/installation", Canned.slow(3.0))   # then answers
    fake_github.set_outage(Canned.server_error(503))         # everything fails until None
    fake_github.requests_to("POST", "/repos/org/backend/dispatches")   # what was received
    fake_github.sleeps                                       # waits hud.github asked for

Time comes from `hud.core.clock.now()` in the server thread, so freeze the clock for all threads
(the `frozen_clock` fixture, or `clock.frozen_at(..., all_threads=True)`).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import itertools
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import hud.github.client
from hud.core import clock

JWT_MAX_LIFETIME = dt.timedelta(minutes=10)
TOKEN_LIFETIME = dt.timedelta(hours=1)
BOT_LOGIN = "crcr-hud[bot]"


@dataclass
class Canned:
    """A scripted answer: status, JSON body and headers, after an optional delay.

    With `passthrough=True` the server waits `delay` seconds and then answers normally.
    """

    status: int = 500
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    passthrough: bool = False

    @classmethod
    def server_error(cls, status: int = 500) -> Canned:
        """A 5xx answer."""
        return cls(status, {"message": "Server Error"})

    @classmethod
    def secondary_rate_limit(cls, retry_after: float | None = 60) -> Canned:
        """GitHub's 403 secondary rate limit, with `retry-after` unless None."""
        headers = {} if retry_after is None else {"retry-after": str(retry_after)}
        return cls(
            403,
            {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."},
            headers,
        )

    @classmethod
    def rate_limited(cls, reset_at: float, status: int = 429) -> Canned:
        """A primary rate limit (429 or 403) with remaining 0 and `x-ratelimit-reset`."""
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(reset_at))}
        return cls(status, {"message": "API rate limit exceeded"}, headers)

    @classmethod
    def not_found(cls) -> Canned:
        """A 404."""
        return cls(404, {"message": "Not Found"})

    @classmethod
    def slow(cls, delay: float, then: Canned | None = None) -> Canned:
        """Wait `delay` seconds, then answer normally (or with `then`)."""
        if then is None:
            return cls(200, delay=delay, passthrough=True)
        return cls(then.status, then.body, dict(then.headers), delay=delay)


@dataclass
class RecordedRequest:
    """One request the fake received, and what it answered."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    json: Any
    status: int = 0
    auth_error: str | None = None

    @property
    def bearer(self) -> str | None:
        """The credential after `Bearer `/`token ` in the Authorization header."""
        value = self.headers.get("authorization", "")
        scheme, _, credential = value.partition(" ")
        return credential if scheme.lower() in ("bearer", "token") else None


@dataclass
class FakeApp:
    """A GitHub App the fake knows: its id and key pair."""

    app_id: int
    private_key_pem: str = field(repr=False)
    public_key: rsa.RSAPublicKey = field(repr=False)


@dataclass
class Installation:
    """An installation of one app on one account, covering some repositories."""

    id: int
    app_id: int
    account: str
    repos: set[str] = field(default_factory=set)


def generate_private_key_pem() -> str:
    """Generate a fresh 2048-bit RSA key as unencrypted PKCS#8 PEM text."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@cache
def _default_private_key_pem() -> str:
    # Key generation takes tens of milliseconds; the default app reuses one key per session.
    return generate_private_key_pem()


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; no 40 ms stalls
    server: _Server

    def route(self) -> None:
        """Hand every method to the fake, which matches it against its routes."""
        self.server.fake._handle(self)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = route

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the fake records requests instead of printing them."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeGitHub

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out and hung up is expected here; do not print tracebacks."""


class _Answer(Exception):
    """Raised inside a route to answer with a status and JSON body."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


class FakeGitHub:
    """A threaded local HTTP server that answers like GitHub's REST API for the relay."""

    def __init__(self, now: Callable[[], dt.datetime] = clock.now) -> None:
        self.now = now
        self.apps: dict[int, FakeApp] = {}
        self.installations: dict[int, Installation] = {}
        self.requests: list[RecordedRequest] = []
        self.sleeps: list[float] = []
        self.sleep_clock: Any = None
        self.dispatches: list[dict[str, Any]] = []
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}
        self.reruns: list[dict[str, Any]] = []
        self.running_runs: set[tuple[str, int]] = set()
        self.tokens: dict[str, tuple[int, dt.datetime]] = {}
        self.settings: Any = None
        self._queues: list[tuple[str, str, list[Canned]]] = []
        self._outage: Canned | None = None
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._app_ids = itertools.count(1)
        self._installation_ids = itertools.count(100)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        repo = r"/repos/(?P<repo>[^/]+/[^/]+)"
        routes = [
            ("GET", repo + r"/installation", self._installation, "jwt"),
            ("POST", r"/app/installations/(?P<iid>\d+)/access_tokens", self._access_token, "jwt"),
            ("POST", repo + r"/dispatches", self._dispatch, "token"),
            ("POST", repo + r"/check-runs", self._create_check_run, "token"),
            ("PATCH", repo + r"/check-runs/(?P<cid>\d+)", self._update_check_run, "token"),
            ("GET", repo + r"/check-runs/(?P<cid>\d+)", self._get_check_run, "token"),
            ("GET", repo + r"/commits/(?P<ref>[^/]+)/check-runs", self._list_check_runs, "token"),
            ("GET", repo + r"/issues/(?P<number>\d+)/comments", self._list_comments, "token"),
            ("POST", repo + r"/issues/(?P<number>\d+)/comments", self._create_comment, "token"),
            ("PATCH", repo + r"/issues/comments/(?P<cid>\d+)", self._update_comment, "token"),
            ("POST", repo + r"/actions/runs/(?P<run>\d+)/rerun-failed-jobs", self._rerun, "token"),
            ("POST", repo + r"/actions/runs/(?P<run>\d+)/rerun", self._rerun, "token"),
        ]
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Any], str]] = [
            (method, re.compile(pattern), handler, kind)
            for method, pattern, handler, kind in routes
        ]

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to use as GITHUB_API_URL."""
        assert self._server is not None, "start() the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeGitHub:
        """Listen on 127.0.0.1 on a free port, serving from a daemon thread."""
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # --- configuration ------------------------------------------------------------------------

    def add_app(self, app_id: int | None = None, private_key_pem: str | None = None) -> FakeApp:
        """Register a GitHub App (a fresh key unless one is given) and return it."""
        pem = private_key_pem or generate_private_key_pem()
        private = serialization.load_pem_private_key(pem.encode(), password=None)
        assert isinstance(private, rsa.RSAPrivateKey)
        with self._lock:
            app_id = app_id if app_id is not None else max([0, *self.apps]) + 1
            app = FakeApp(app_id, pem, private.public_key())
            self.apps[app_id] = app
        return app

    @property
    def default_app(self) -> FakeApp:
        """The first registered app (the fixture's upstream app)."""
        return self.apps[min(self.apps)]

    def enable_dispatch_app(self) -> FakeApp:
        """Register a second app and point the GITHUB_DISPATCH_APP_* settings at it."""
        assert self.settings is not None, "only available through the fake_github fixture"
        app = self.add_app()
        self.settings.GITHUB_DISPATCH_APP_ID = str(app.app_id)
        self.settings.GITHUB_DISPATCH_APP_PRIVATE_KEY = app.private_key_pem
        return app

    def install(self, repo: str, *, app_id: int | None = None) -> int:
        """Install an app (default: the first) on `repo`; returns the installation id.

        Like GitHub, one installation covers every repository of an account it is given.
        """
        owner = repo.split("/", 1)[0].lower()
        app_id = app_id if app_id is not None else self.default_app.app_id
        with self._lock:
            for installation in self.installations.values():
                if installation.app_id == app_id and installation.account == owner:
                    installation.repos.add(repo.lower())
                    return installation.id
            installation = Installation(next(self._installation_ids), app_id, owner, {repo.lower()})
            self.installations[installation.id] = installation
            return installation.id

    def uninstall(self, repo: str, *, app_id: int | None = None) -> None:
        """Remove `repo` from the app's installation (lookups then answer 404)."""
        app_id = app_id if app_id is not None else self.default_app.app_id
        with self._lock:
            for installation in self.installations.values():
                if installation.app_id == app_id:
                    installation.repos.discard(repo.lower())

    def enqueue(self, method: str, path: str, *responses: Canned, times: int = 1) -> None:
        """Queue canned answers for requests matching `method` and the fnmatch `path`.

        Each queued answer is used once, in order (`times` repeats the whole sequence); when
        the queue of a route is empty, the fake answers normally again.
        """
        with self._lock:
            self._queues.append((method.upper(), path, list(responses) * times))

    def set_outage(self, answer: Canned | None) -> None:
        """Answer every request with `answer` (before authentication) until set to None."""
        with self._lock:
            self._outage = answer

    def mark_running(self, repo: str, run_id: int) -> None:
        """Make re-run requests for this workflow run answer 403 "already running"."""
        with self._lock:
            self.running_runs.add((repo.lower(), int(run_id)))

    def finish_run(self, repo: str, run_id: int) -> None:
        """Let this workflow run be re-run again."""
        with self._lock:
            self.running_runs.discard((repo.lower(), int(run_id)))

    def record_sleep(self, seconds: float) -> None:
        """Stand-in for `hud.github.client.sleep`: record the wait, advance `sleep_clock` if set."""
        self.sleeps.append(seconds)
        if self.sleep_clock is not None:
            self.sleep_clock.advance(seconds=seconds)

    # --- inspection ---------------------------------------------------------------------------

    def requests_to(self, method: str | None = None, path: str = "*") -> list[RecordedRequest]:
        """The recorded requests matching `method` (any if None) and the fnmatch `path`."""
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method.upper())
                and fnmatch.fnmatchcase(r.path, path)
            ]

    def check_runs_for(self, repo: str, head_sha: str | None = None) -> list[dict[str, Any]]:
        """The check runs created on `repo` (optionally on one head SHA), oldest first."""
        with self._lock:
            return [
                run
                for run in self.check_runs.values()
                if run["repository"] == repo.lower()
                and (head_sha is None or run["head_sha"] == head_sha)
            ]

    def comments_on(self, repo: str, number: int) -> list[dict[str, Any]]:
        """The comments on an issue or PR, oldest first."""
        with self._lock:
            return [
                c
                for c in self.comments.values()
                if c["repository"] == repo.lower() and c["issue_number"] == int(number)
            ]

    # --- the request cycle --------------------------------------------------------------------

    def _handle(self, handler: _Handler) -> None:
        split = urlsplit(handler.path)
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = RecordedRequest(
            method=handler.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in handler.headers.items()},
            json=body,
        )
        with self._lock:
            self.requests.append(record)
            outage = self._outage
            canned = None if outage else self._next_canned(record.method, record.path)
        status, payload, headers = self._answer(record, outage, canned)
        record.status = status
        self._write(handler, status, payload, headers)

    def _next_canned(self, method: str, path: str) -> Canned | None:
        for queue_method, pattern, answers in self._queues:
            if answers and queue_method == method and fnmatch.fnmatchcase(path, pattern):
                return answers.pop(0)
        return None

    def _answer(
        self, record: RecordedRequest, outage: Canned | None, canned: Canned | None
    ) -> tuple[int, Any, dict[str, str]]:
        if outage is not None:
            time.sleep(outage.delay)
            return outage.status, outage.body, dict(outage.headers)
        route = self._match(record.method, record.path)
        if route is None:
            return 404, {"message": "Not Found"}, {}
        handler, params, auth_kind = route
        try:
            identity = self._authenticate(record, auth_kind, params)
        except _Answer as answer:
            record.auth_error = str(answer.body.get("message"))
            return answer.status, answer.body, answer.headers
        if canned is not None:
            time.sleep(canned.delay)
            if not canned.passthrough:
                return canned.status, canned.body, dict(canned.headers)
        try:
            with self._lock:
                status, payload = handler(record, identity, **params)
        except _Answer as answer:
            return answer.status, answer.body, answer.headers
        headers: dict[str, str] = {}
        if isinstance(payload, tuple):
            payload, headers = payload
        return status, payload, headers

    def _match(self, method: str, path: str) -> tuple[Callable[..., Any], dict, str] | None:
        for route_method, pattern, handler, auth_kind in self._routes:
            match = pattern.fullmatch(path)
            if route_method == method and match:
                return handler, match.groupdict(), auth_kind
        return None

    def _write(self, handler: _Handler, status: int, payload: Any, headers: dict[str, str]):
        data = b"" if payload is None or status == 204 else json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json; charset=utf-8")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
        except OSError:  # the client hung up (it timed out)
            handler.close_connection = True

    # --- authentication -----------------------------------------------------------------------

    def _authenticate(self, record: RecordedRequest, kind: str, params: dict) -> Any:
        credential = record.bearer
        if not credential:
            raise _Answer(401, {"message": "Requires authentication"})
        if kind == "jwt":
            return self._verify_jwt(credential)
        return self._verify_token(credential, params["repo"])

    def _verify_jwt(self, token: str) -> FakeApp:
        bad = _Answer(401, {"message": "A JSON web token could not be decoded"})
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
            app = self.apps[int(unverified["iss"])]
            claims = jwt.decode(
                token,
                app.public_key,
                algorithms=["RS256"],
                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
            )
        except (jwt.PyJWTError, KeyError, ValueError, TypeError):
            raise bad from None
        if header.get("alg") != "RS256":
            raise bad
        now = self.now().timestamp()
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int) or not isinstance(exp, int):
            raise bad
        if iat > now + 1:
            raise _Answer(
                401, {"message": "'Issued at' claim ('iat') must be an Integer in the past"}
            )
        if exp <= now or exp - now > JWT_MAX_LIFETIME.total_seconds():
            raise _Answer(
                401, {"message": "'Expiration time' claim ('exp') is too far in the future"}
            )
        return app

    def _verify_token(self, token: str, repo: str) -> Installation:
        with self._lock:
            entry = self.tokens.get(token)
            if entry is None or entry[1] <= self.now():
                raise _Answer(401, {"message": "Bad credentials"})
            installation = self.installations.get(entry[0])
            if installation is None or repo.lower() not in installation.repos:
                raise _Answer(404, {"message": "Not Found"})
            return installation

    # --- routes -------------------------------------------------------------------------------

    def _installation(self, record: RecordedRequest, app: FakeApp, repo: str) -> tuple[int, Any]:
        for installation in self.installations.values():
            if installation.app_id == app.app_id and repo.lower() in installation.repos:
                return 200, {
                    "id": installation.id,
                    "app_id": app.app_id,
                    "account": {"login": installation.account},
                    "repository_selection": "selected",
                }
        raise _Answer(404, {"message": "Not Found"})

    def _access_token(self, record: RecordedRequest, app: FakeApp, iid: str) -> tuple[int, Any]:
        installation = self.installations.get(int(iid))
        if installation is None or installation.app_id != app.app_id:
            raise _Answer(404, {"message": "Not Found"})
        token = "ghs_" + secrets.token_urlsafe(27)
        expires_at = self.now().replace(microsecond=0) + TOKEN_LIFETIME
        self.tokens[token] = (installation.id, expires_at)
        return 201, {
            "token": token,
            "expires_at": _iso(expires_at),
            "permissions": {"checks": "write", "contents": "write", "actions": "write"},
            "repository_selection": "selected",
        }

    def _dispatch(self, record: RecordedRequest, inst: Installation, repo: str) -> tuple[int, Any]:
        body = record.json if isinstance(record.json, dict) else {}
        payload = body.get("client_payload", {})
        if not body.get("event_type") or not isinstance(payload, dict):
            raise _Answer(422, {"message": "Invalid request."})
        if len(payload) > 10 or len(json.dumps(payload).encode()) >= 65536:
            raise _Answer(422, {"message": "client_payload is too large"})
        self.dispatches.append(
            {
                "repository": repo.lower(),
                "event_type": body["event_type"],
                "client_payload": payload,
            }
        )
        return 204, None

    def _create_check_run(
        self, record: RecordedRequest, inst: Installation, repo: str
    ) -> tuple[int, Any]:
        body = record.json if isinstance(record.json, dict) else {}
        if not body.get("name") or not body.get("head_sha"):
            raise _Answer(422, {"message": "Invalid request. name and head_sha are required."})
        run_id = next(self._ids)
        run = {
            "id": run_id,
            "status": "queued",
            "conclusion": None,
            "external_id": "",
            "details_url": None,
            "output": {"title": None, "summary": None, "text": None},
            "started_at": None,
            "completed_at": None,
            **body,
            "repository": repo.lower(),
            "html_url": f"https://github.com/{repo}/runs/{run_id}",
            "updates": 0,
        }
        if body.get("conclusion"):
            run["status"] = "completed"
        self.check_runs[run_id] = run
        return 201, self._public_run(run)

    def _update_check_run(
        self, record: RecordedRequest, inst: Installation, repo: str, cid: str
    ) -> tuple[int, Any]:
        run = self.check_runs.get(int(cid))
        if run is None or run["repository"] != repo.lower():
            raise _Answer(404, {"message": "Not Found"})
        body = record.json if isinstance(record.json, dict) else {}
        run.update({k: v for k, v in body.items() if k not in ("id", "repository")})
        if body.get("conclusion"):
            run["status"] = "completed"
        run["updates"] += 1
        return 200, self._public_run(run)

    def _get_check_run(
        self, record: RecordedRequest, inst: Installation, repo: str, cid: str
    ) -> tuple[int, Any]:
        run = self.check_runs.get(int(cid))
        if run is None or run["repository"] != repo.lower():
            raise _Answer(404, {"message": "Not Found"})
        return 200, self._public_run(run)

    def _list_check_runs(
        self, record: RecordedRequest, inst: Installation, repo: str, ref: str
    ) -> tuple[int, Any]:
        name = (record.query.get("check_name") or [None])[0]
        runs = [
            self._public_run(r)
            for r in self.check_runs.values()
            if r["repository"] == repo.lower()
            and r["head_sha"] == ref
            and (name is None or r["name"] == name)
        ]
        page, headers = self._page(record, runs)
        return 200, ({"total_count": len(runs), "check_runs": page}, headers)

    def _list_comments(
        self, record: RecordedRequest, inst: Installation, repo: str, number: str
    ) -> tuple[int, Any]:
        comments = [
            self._public_comment(c)
            for c in self.comments.values()
            if c["repository"] == repo.lower() and c["issue_number"] == int(number)
        ]
        page, headers = self._page(record, comments)
        return 200, (page, headers)

    def _create_comment(
        self, record: RecordedRequest, inst: Installation, repo: str, number: str
    ) -> tuple[int, Any]:
        body = record.json if isinstance(record.json, dict) else {}
        if not isinstance(body.get("body"), str):
            raise _Answer(422, {"message": "Invalid request. body is required."})
        comment_id = next(self._ids)
        stamp = _iso(self.now())
        self.comments[comment_id] = {
            "id": comment_id,
            "body": body["body"],
            "user": {"login": BOT_LOGIN, "type": "Bot"},
            "created_at": stamp,
            "updated_at": stamp,
            "html_url": f"https://github.com/{repo}/pull/{number}#issuecomment-{comment_id}",
            "repository": repo.lower(),
            "issue_number": int(number),
            "updates": 0,
        }
        return 201, self._public_comment(self.comments[comment_id])

    def _update_comment(
        self, record: RecordedRequest, inst: Installation, repo: str, cid: str
    ) -> tuple[int, Any]:
        comment = self.comments.get(int(cid))
        if comment is None or comment["repository"] != repo.lower():
            raise _Answer(404, {"message": "Not Found"})
        body = record.json if isinstance(record.json, dict) else {}
        if not isinstance(body.get("body"), str):
            raise _Answer(422, {"message": "Invalid request. body is required."})
        comment["body"] = body["body"]
        comment["updated_at"] = _iso(self.now())
        comment["updates"] += 1
        return 200, self._public_comment(comment)

    def _rerun(
        self, record: RecordedRequest, inst: Installation, repo: str, run: str
    ) -> tuple[int, Any]:
        key = (repo.lower(), int(run))
        if key in self.running_runs:
            raise _Answer(403, {"message": "This workflow is already running"})
        kind = "failed_jobs" if record.path.endswith("rerun-failed-jobs") else "all"
        self.reruns.append({"repository": repo.lower(), "run_id": int(run), "kind": kind})
        # Like GitHub, a run that was just re-run is running until told otherwise.
        self.running_runs.add(key)
        return 201, {}

    # --- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _public_run(run: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in run.items() if k not in ("repository", "updates")}

    @staticmethod
    def _public_comment(comment: dict[str, Any]) -> dict[str, Any]:
        hidden = ("repository", "issue_number", "updates")
        return {k: v for k, v in comment.items() if k not in hidden}

    def _page(self, record: RecordedRequest, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
        per_page = max(1, min(100, int((record.query.get("per_page") or ["30"])[0])))
        page = max(1, int((record.query.get("page") or ["1"])[0]))
        start = (page - 1) * per_page
        headers: dict[str, str] = {}
        if start + per_page < len(items):
            params = {k: v[0] for k, v in record.query.items()}
            params.update(page=str(page + 1), per_page=str(per_page))
            query = "&".join(f"{k}={v}" for k, v in params.items())
            headers["Link"] = f'<{self.url}{record.path}?{query}>; rel="next"'
        return items[start : start + per_page], headers


@pytest.fixture
def fake_github(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """A started fake GitHub with one app installed on pytorch/pytorch; settings point at it.

    `hud.github.client.sleep` is replaced by `fake_github.record_sleep`, so no test sleeps
    through a backoff; set `fake_github.sleep_clock = frozen_clock` to move a frozen clock on
    each wait.
    """
    fake = FakeGitHub().start()
    fake.settings = settings
    app = fake.add_app(1, _default_private_key_pem())
    fake.install("pytorch/pytorch")
    settings.GITHUB_API_URL = fake.url
    settings.GITHUB_APP_ID = str(app.app_id)
    settings.GITHUB_APP_PRIVATE_KEY = app.private_key_pem
    settings.GITHUB_APP_PRIVATE_KEY_FILE = None
    settings.GITHUB_DISPATCH_APP_ID = None
    settings.GITHUB_DISPATCH_APP_PRIVATE_KEY = None
    settings.GITHUB_DISPATCH_APP_PRIVATE_KEY_FILE = None
    # Local answers take milliseconds; a short timeout keeps slow-response tests short.
    settings.GITHUB_TIMEOUT = 2.0
    monkeypatch.setattr(hud.github.client, "sleep", fake.record_sleep)
    try:
        yield fake
    finally:
        fake.stop()
