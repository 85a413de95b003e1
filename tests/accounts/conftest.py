"""A local fake of GitHub's OAuth web flow and user API, and settings pointing allauth at it.

A real `http.server` on 127.0.0.1 answers what allauth's GitHub provider calls:

    GET  /login/oauth/authorize     → 302 back to redirect_uri with a one-time code and the state
    POST /login/oauth/access_token  → checks client id, secret, code and redirect_uri; a token
    GET  /api/user, /api/user/emails → the profile and addresses of the token's user

The API lives under /api so the tests prove the OAuth and API base URLs are configured apart.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

CLIENT_ID = "Iv1.test-client"
CLIENT_SECRET = "test-client-secret-value"


@dataclass
class GitHubUser:
    """A GitHub account the fake signs in as."""

    login: str
    id: int
    email: str = ""
    name: str = ""


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    form: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class FakeGitHubOAuth:
    """The fake's state: who signs in next, issued codes and tokens, what it received."""

    url: str = ""
    signing_in: GitHubUser | None = None
    codes: dict[str, tuple[GitHubUser, str]] = field(default_factory=dict)
    tokens: dict[str, GitHubUser] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_url(self) -> str:
        """The API base URL (separate from the OAuth pages)."""
        return f"{self.url}/api"

    def paths(self) -> list[str]:
        """The paths received, in order."""
        return [item.path for item in self.requests]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHubOAuth

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _record(self) -> Recorded:
        parts = urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        item = Recorded(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            form=parse_qs(body),
            headers={key.lower(): value for key, value in self.headers.items()},
        )
        with self.fake.lock:
            self.fake.requests.append(item)
        return item

    def _answer(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        data = b""
        content_type = "application/json"
        if isinstance(body, str):
            data, content_type = body.encode(), "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _user_of(self, item: Recorded) -> GitHubUser | None:
        scheme, _, token = item.headers.get("authorization", "").partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return None
        return self.fake.tokens.get(token)

    def do_GET(self) -> None:
        item = self._record()
        if item.path == "/login/oauth/authorize":
            redirect_uri = item.query.get("redirect_uri", [""])[0]
            if item.query.get("client_id") != [CLIENT_ID] or not redirect_uri:
                return self._answer(400, {"error": "bad client or redirect_uri"})
            if self.fake.signing_in is None:
                return self._answer(500, {"error": "the test set no user to sign in"})
            code = secrets.token_hex(8)
            self.fake.codes[code] = (self.fake.signing_in, redirect_uri)
            params = {"code": code, "state": item.query.get("state", [""])[0]}
            return self._answer(302, headers={"location": f"{redirect_uri}?{urlencode(params)}"})
        if item.path in ("/api/user", "/api/user/emails"):
            person = self._user_of(item)
            if person is None:
                return self._answer(401, {"message": "Bad credentials"})
            if item.path == "/api/user":
                return self._answer(
                    200,
                    {"login": person.login, "id": person.id, "name": person.name, "email": None},
                )
            emails = [{"email": person.email, "primary": True, "verified": True}]
            return self._answer(200, emails if person.email else [])
        return self._answer(404, {"message": "Not Found"})

    def do_POST(self) -> None:
        item = self._record()
        if item.path != "/login/oauth/access_token":
            return self._answer(404, {"message": "Not Found"})
        form = {key: values[0] for key, values in item.form.items()}
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return self._answer(200, "error=incorrect_client_credentials")
        issued = self.fake.codes.pop(form.get("code", ""), None)
        if issued is None or issued[1] != form.get("redirect_uri"):
            return self._answer(200, "error=bad_verification_code")
        token = f"gho_{secrets.token_hex(16)}"
        self.fake.tokens[token] = issued[0]
        # GitHub answers form-encoded unless asked for JSON; allauth reads both.
        return self._answer(
            200, urlencode({"access_token": token, "scope": "read:user,user:email"})
        )


@pytest.fixture
def fake_github_oauth(settings) -> Iterator[FakeGitHubOAuth]:
    """The local fake, with allauth's GitHub provider configured against it."""
    fake = FakeGitHubOAuth()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.CRCR_GITHUB_OAUTH_URL = fake.url
    settings.CRCR_GITHUB_OAUTH_API_URL = fake.api_url
    providers = dict(settings.SOCIALACCOUNT_PROVIDERS)
    providers["github"] = {
        **providers["github"],
        "APPS": [{"client_id": CLIENT_ID, "secret": CLIENT_SECRET, "key": ""}],
    }
    settings.SOCIALACCOUNT_PROVIDERS = providers
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
