"""A fake GitHub Actions OIDC issuer: a real local JWKS server and a token minter.

Use the `oidc` fixture: `oidc.mint(repository="org/repo")` signs a GitHub-like token,
`oidc.headers(...)` wraps one for Django's test client, `oidc.requests` counts JWKS fetches,
`oidc.fail()` / `oidc.recover()` make the server answer 500 or not, `oidc.rotate()` swaps in
a new signing key. Times are based on `hud.core.clock.now()`, so the `frozen_clock` fixture
moves them.
"""

import base64
import hashlib
import hmac
import http.server
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from hud.core import clock

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
CRCR_AUDIENCE = "pytorch-cross-repo-ci-relay"
JWKS_PATH = "/.well-known/jwks"
TOKEN_LIFETIME_SECONDS = 300
_UNSET: Any = object()


@dataclass(frozen=True)
class SigningKey:
    """An RSA key pair with the kid it is published under."""

    kid: str
    private_key: rsa.RSAPrivateKey

    @property
    def public_pem(self) -> bytes:
        """The public key as PEM (what an HS256 key-confusion attack would use as secret)."""
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def jwk(self) -> dict[str, Any]:
        """The public key as a JWK, as GitHub publishes it."""
        jwk = RSAAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}


@pytest.fixture(scope="session")
def oidc_signing_keys() -> list[SigningKey]:
    """Three RSA keys generated once per session: current, rotated-in, and never published."""
    return [
        SigningKey(kid=f"test-key-{index}", private_key=rsa.generate_private_key(65537, 2048))
        for index in range(3)
    ]


class _JwksServer:
    """A ThreadingHTTPServer on 127.0.0.1 serving a JWKS document, counting requests."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.document: dict[str, Any] = {"keys": []}
        self.fail_status: int | None = None
        self.request_count = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner.lock:
                    owner.request_count += 1
                    fail_status = owner.fail_status
                    body = json.dumps(owner.document).encode()
                if self.path != JWKS_PATH:
                    self.send_error(404)
                    return
                if fail_status is not None:
                    self.send_error(fail_status)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # A short poll interval keeps shutdown (and so each test's teardown) quick.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        """The JWKS URL."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}{JWKS_PATH}"

    def start(self) -> None:
        """Serve in a daemon thread."""
        self.thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class OidcIssuer:
    """The `oidc` fixture: mints GitHub-like tokens and controls the local JWKS server."""

    def __init__(self, server: _JwksServer, keys: list[SigningKey], settings: Any) -> None:
        self._server = server
        self._settings = settings
        self.keys = keys
        self.current = keys[0]
        self.unpublished = keys[2]
        self._publish([self.current])

    # -- server control --------------------------------------------------------------------

    @property
    def jwks_url(self) -> str:
        """Where the JWKS is served (settings.CRCR_OIDC_JWKS_URL points here)."""
        return self._server.url

    @property
    def requests(self) -> int:
        """How many requests the JWKS server has answered (or refused) so far."""
        with self._server.lock:
            return self._server.request_count

    @property
    def kid(self) -> str:
        """The kid of the current signing key."""
        return self.current.kid

    @property
    def public_pem(self) -> bytes:
        """The current public key as PEM."""
        return self.current.public_pem

    def fail(self, status: int = 500) -> None:
        """Make the JWKS server answer `status` to every request."""
        with self._server.lock:
            self._server.fail_status = status

    def recover(self) -> None:
        """Make the JWKS server answer normally again."""
        with self._server.lock:
            self._server.fail_status = None

    def rotate(self, *, keep_old: bool = False) -> str:
        """Sign with the second key from now on and publish it (alone unless keep_old)."""
        old = self.current
        self.current = self.keys[1] if old is self.keys[0] else self.keys[0]
        self._publish([self.current, old] if keep_old else [self.current])
        return self.current.kid

    def _publish(self, keys: list[SigningKey]) -> None:
        with self._server.lock:
            self._server.document = {"keys": [key.jwk() for key in keys]}

    # -- tokens ----------------------------------------------------------------------------

    def claims(self, repository: Any = "org/repo") -> dict[str, Any]:
        """The claims of a fresh GitHub Actions token for `repository`, timed by hud.core.clock."""
        now = int(clock.now().timestamp())
        owner = str(repository).split("/", 1)[0]
        return {
            "iss": self._settings.CRCR_OIDC_ISSUER,
            "aud": self._settings.CRCR_OIDC_AUDIENCE,
            "sub": f"repo:{repository}:ref:refs/heads/main",
            "repository": repository,
            "repository_owner": owner,
            "repository_id": "123456",
            "ref": "refs/heads/main",
            "sha": "0" * 40,
            "workflow": "crcr",
            "event_name": "repository_dispatch",
            "run_id": "9876543210",
            "run_attempt": "1",
            "runner_environment": "github-hosted",
            "jti": str(uuid.uuid4()),
            "iat": now,
            "nbf": now - 5,
            "exp": now + TOKEN_LIFETIME_SECONDS,
        }

    def mint(
        self,
        repository: Any = "org/repo",
        *,
        alg: str = "RS256",
        key: Any = _UNSET,
        kid: str | None = _UNSET,
        drop: tuple[str, ...] = (),
        header: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> str:
        """Sign a GitHub-like token; keyword overrides replace claims, `drop` removes them.

        `key` defaults to the current private key (RS*), the current public PEM (HS*: the
        key-confusion attack) or nothing (alg "none"); `kid=None` leaves the kid out.
        """
        payload = {**self.claims(repository), **overrides}
        for name in drop:
            payload.pop(name, None)
        headers = {"kid": self.current.kid if kid is _UNSET else kid, **(header or {})}
        if headers["kid"] is None:
            del headers["kid"]
        if alg.startswith("HS"):
            secret = self.public_pem if key is _UNSET else key
            return _sign_hmac(payload, headers, alg, secret)
        if alg == "none":
            return _unsigned(payload, headers)
        signing_key = self.current.private_key if key is _UNSET else key
        return jwt.encode(payload, signing_key, algorithm=alg, headers=headers)

    def headers(self, repository: str = "org/repo", **overrides: Any) -> dict[str, str]:
        """Django test-client headers carrying a fresh bearer token: `client.post(..., **h)`."""
        return {"HTTP_AUTHORIZATION": f"Bearer {self.mint(repository, **overrides)}"}


def _segments(payload: dict[str, Any], headers: dict[str, Any], alg: str) -> str:
    header = {"alg": alg, "typ": "JWT", **headers}
    return ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, payload)
    )


def _sign_hmac(payload: dict[str, Any], headers: dict[str, Any], alg: str, secret: Any) -> str:
    """Sign by hand: PyJWT refuses a PEM as HMAC secret, which is the attack we simulate."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    signing_input = _segments(payload, headers, alg)
    secret_bytes = secret.encode() if isinstance(secret, str) else secret
    signature = hmac.new(secret_bytes, signing_input.encode(), digest).digest()
    return f"{signing_input}.{_b64url(signature)}"


def _unsigned(payload: dict[str, Any], headers: dict[str, Any]) -> str:
    return _segments(payload, headers, "none") + "."


@pytest.fixture
def oidc(settings: Any, oidc_signing_keys: list[SigningKey]) -> Iterator[OidcIssuer]:
    """A local OIDC issuer: JWKS server on 127.0.0.1 and settings pointed at it."""
    server = _JwksServer()
    server.start()
    settings.CRCR_OIDC_ISSUER = GITHUB_ISSUER
    settings.CRCR_OIDC_AUDIENCE = CRCR_AUDIENCE
    settings.CRCR_OIDC_JWKS_URL = server.url
    settings.CRCR_OIDC_LEEWAY_SECONDS = 30
    settings.CRCR_JWKS_REFRESH_COOLDOWN_SECONDS = 60
    settings.CRCR_JWKS_MAX_AGE_SECONDS = 3600
    try:
        yield OidcIssuer(server, oidc_signing_keys, settings)
    finally:
        server.stop()
