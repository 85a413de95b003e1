"""The one settings module: every value comes from the environment.

The embedded default (no environment at all) is SQLite plus an in-process task pool;
production sets DATABASE_URL, CELERY_BROKER_URL, CACHE_URL, SECRET_KEY and ALLOWED_HOSTS.
"""

import logging
import os
import sys
import tempfile
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name: str, default: str | None = None) -> str | None:
    """Read a setting from the environment, or from the file named by NAME_FILE."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        return Path(file_name).read_text().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """Read a boolean setting ("1", "true", "yes", "on" are true)."""
    value = env(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    """Read a comma-separated list setting."""
    return [item.strip() for item in (env(name, default) or "").split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env("SECRET_KEY")
# Test runs bring their own keys and databases; they are never a production start.
TESTING = "pytest" in sys.modules or sys.argv[1:2] == ["test"]
SERVER_DATABASE = not (env("DATABASE_URL") or "sqlite").startswith("sqlite")
if not SECRET_KEY:
    # Production is recognised by its database: DEBUG off against a server database (not the
    # embedded SQLite file) refuses to start without a key instead of using a public one.
    production = not DEBUG and not TESTING and SERVER_DATABASE
    if production or (not DEBUG and env_bool("CRCR_REQUIRE_SECRET_KEY", False)):
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off and DATABASE_URL "
            "names a database server"
        )
    # Embedded default only: a key derived from nothing secret. Production sets SECRET_KEY.
    SECRET_KEY = "embedded-default-insecure-key-set-SECRET_KEY-in-production"
# The sign-in page lists the demo's sign-ins (those whose users exist) in the embedded default.
CRCR_SHOW_DEMO_SIGN_INS = env_bool("CRCR_SHOW_DEMO_SIGN_INS", not SERVER_DATABASE)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "hud",
    "api",
]

MIDDLEWARE = [
    # First, so every later log line of the request carries its id and every answer is counted.
    "config.logging_context.RequestIdMiddleware",
    "api.metrics.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Before any view: NUL in the URL → 400; an unreachable database → 503 with Retry-After.
    "hud.web.request_guard.RequestGuardMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = env("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Concurrent writers wait for the lock instead of failing with "database is locked".
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file (not :memory:) so threads in concurrency tests share it; one per process so
    # parallel test runs never share a file.
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(tempfile.gettempdir()) / f"crcr-hud-test-{os.getpid()}.sqlite3")
    }
else:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Parameters bound by the server, and a statement run five times on a connection prepared
    # there: the callback path runs the same few statements on every request (see
    # docs/performance.md). Behind a PgBouncer older than 1.21 in transaction mode, which
    # cannot keep prepared statements, set DATABASE_PREPARED_STATEMENTS=0.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True,
        prepare_threshold=5 if env_bool("DATABASE_PREPARED_STATEMENTS", True) else None,
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache (token cache, write governor, JWKS) -------------------------------------------
CACHE_URL = env("CACHE_URL")
if CACHE_URL:
    CACHES = {
        "default": {
            # RedisCache that degrades (miss, drop) while Redis is down: see config/cache.py.
            "BACKEND": "config.cache.TolerantRedisCache",
            "LOCATION": CACHE_URL,
            # Parallel test workers (pytest-xdist) share the Redis database; each clears only
            # its own keys (config.cache.TolerantRedisCache.clear).
            "KEY_PREFIX": "crcr-" + os.environ["PYTEST_XDIST_WORKER"]
            if TESTING and "PYTEST_XDIST_WORKER" in os.environ
            else "crcr",
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
elif TESTING:
    # Each test (and xdist worker) starts from its own empty cache.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    # Embedded: files, so the server, `run_periodic` and `seed_demo` share tokens, leases and
    # the kept gates as production's processes share Redis. Culling (a third of the entries,
    # at random) would drop live leases: the cap is far above what a deployment keeps.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": env("CACHE_DIR", str(BASE_DIR / "var" / "cache")),
            "OPTIONS": {"MAX_ENTRIES": 1_000_000},
        }
    }

# --- Celery -------------------------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL") or None
# A task is acknowledged when it ends: one whose worker process dies is handed back at once
# (reject on worker lost) and redelivered with its id, which takes back its leases
# (hud.core.leases).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Every run is killed after this many seconds (the reconcilers redo what it left).
CELERY_TASK_TIME_LIMIT = int(env("CRCR_TASK_TIME_LIMIT", "600"))
# Redis hands an unacknowledged message to another worker after the visibility timeout; it must
# outlast the longest run and the longest retry countdown a worker holds a message for
# (hud.relay.retry_delay: an hour plus 10 % jitter), or one message would run twice.
CRCR_LONGEST_RETRY_COUNTDOWN_SECONDS = 3960
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CRCR_LONGEST_RETRY_COUNTDOWN_SECONDS + CELERY_TASK_TIME_LIMIT + 60
}
# Workers and beat log through LOGGING below (config.celery's setup_logging receiver).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_TASK_IGNORE_RESULT = True
# In-process pool size for the embedded default (no broker).
CRCR_INPROCESS_WORKERS = int(env("CRCR_INPROCESS_WORKERS", "2"))

# --- Auth, i18n, static -------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/crcr"
# Signing out lands on the HUD, not on the Django admin's "logged out" page.
LOGOUT_REDIRECT_URL = "/crcr"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "config.storage.StaticStorage"},
}
# Serve straight from the source folders when collectstatic has not run (embedded default).
WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "staticfiles.json").exists()
WHITENOISE_MAX_AGE = 3600

# --- Security ----------------------------------------------------------------------------
# A callback body may be 2 MB; Django must let it through so we can answer 413 ourselves.
CRCR_MAX_BODY_BYTES = 2 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = CRCR_MAX_BODY_BYTES + 1024
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
if env_bool("CRCR_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(env("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    if not SECURE_HSTS_PRELOAD:
        # Preloading commits the whole domain to HTTPS in browsers for months and is hard to
        # undo, so it stays an explicit choice (SECURE_HSTS_PRELOAD=1), not a deploy warning.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# --- REST framework -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
        "api.renderers.SafeCSVRenderer",
    ],
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "URL_FORMAT_OVERRIDE": "format",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "CRCR HUD API",
    "DESCRIPTION": "Results of PyTorch's Cross-Repository CI Relay: ingestion and read API.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # api.openapi adds the webhook, callback and forward endpoints (plain Django views) with
    # their auth, and drops the session-cookie lock from the public reads.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.openapi.document_ingestion",
    ],
}

# --- CRCR ---------------------------------------------------------------------------------
CRCR_UPSTREAM_REPO = env("CRCR_UPSTREAM_REPO", "pytorch/pytorch")
CRCR_ALLOWLIST = env("CRCR_ALLOWLIST")
# The relay's probe backend: an allowlisted repo whose workflow only proves the relay works.
CRCR_PROBE_REPO = env("CRCR_PROBE_REPO", "pytorch/crcr-test")
CRCR_OIDC_ISSUER = env("CRCR_OIDC_ISSUER", "https://token.actions.githubusercontent.com")
CRCR_OIDC_JWKS_URL = env("CRCR_OIDC_JWKS_URL", f"{CRCR_OIDC_ISSUER}/.well-known/jwks")
CRCR_OIDC_AUDIENCE = env("CRCR_OIDC_AUDIENCE", "pytorch-cross-repo-ci-relay")
CRCR_OIDC_LEEWAY_SECONDS = int(env("CRCR_OIDC_LEEWAY_SECONDS", "30"))
CRCR_JWKS_REFRESH_COOLDOWN_SECONDS = int(env("CRCR_JWKS_REFRESH_COOLDOWN_SECONDS", "60"))
CRCR_JWKS_MAX_AGE_SECONDS = int(env("CRCR_JWKS_MAX_AGE_SECONDS", "3600"))
# After a failed JWKS fetch with no keys cached, tokens are refused at once for this long
# instead of each waiting on the issuer (a negative cache).
CRCR_JWKS_FAILURE_COOLDOWN_SECONDS = int(env("CRCR_JWKS_FAILURE_COOLDOWN_SECONDS", "10"))
CRCR_RATE_LIMIT_PER_MIN = int(env("CRCR_RATE_LIMIT_PER_MIN", "100"))
CRCR_ZOMBIE_TIMEOUT_SECONDS = int(env("CRCR_ZOMBIE_TIMEOUT", str(6 * 3600)))
CRCR_NO_RESPONSE_AFTER_SECONDS = int(env("CRCR_NO_RESPONSE_AFTER", str(2 * 3600)))
HUD_BOT_KEY = env("HUD_BOT_KEY")
# Path of the gate policy YAML; unset = the shipped hud/gates/gate_policy.yml.
CRCR_GATE_POLICY = env("CRCR_GATE_POLICY")
# How long a backend page may show a kept gate evaluation when no write of the backend changed
# it (hud.promotion.snapshot): the bound on window sliding and other backends' corroboration.
CRCR_GATE_SNAPSHOT_SECONDS = int(env("CRCR_GATE_SNAPSHOT_SECONDS", "300"))
# How long after a view finds the kept gate behind its results its background refresh starts:
# the viewer is answered before it runs, and one refresh counts a whole burst of results.
# Tests refresh at once (a timer firing after a test would reach a database being dropped);
# tests/promotion/test_snapshot.py sets it to check the delay.
CRCR_GATE_REFRESH_DELAY_SECONDS = int(
    env("CRCR_GATE_REFRESH_DELAY_SECONDS", "0" if TESTING else "5")
)
# Failure attribution: a file of infra signatures instead of hud/attribution/infra_signatures.yml.
CRCR_INFRA_SIGNATURES = env("CRCR_INFRA_SIGNATURES")
# The relay (webhook in, dispatches out). GitHub App keys may come from NAME_FILE (see env()).
GITHUB_WEBHOOK_SECRET = env("GITHUB_WEBHOOK_SECRET")
# Webhook bodies may be far larger than callbacks (GitHub caps them at 25 MB).
CRCR_WEBHOOK_MAX_BODY_BYTES = int(env("CRCR_WEBHOOK_MAX_BODY_BYTES", str(25 * 1024 * 1024)))
CRCR_PUSH_REFS = env_list(
    "CRCR_PUSH_REFS", "refs/heads/main,refs/heads/release/*,refs/tags/ciflow/*"
)
GITHUB_API_URL = env("GITHUB_API_URL", "https://api.github.com")
GITHUB_APP_ID = env("GITHUB_APP_ID")
GITHUB_APP_PRIVATE_KEY = env("GITHUB_APP_PRIVATE_KEY")
GITHUB_DISPATCH_APP_ID = env("GITHUB_DISPATCH_APP_ID")
GITHUB_DISPATCH_APP_PRIVATE_KEY = env("GITHUB_DISPATCH_APP_PRIVATE_KEY")
GITHUB_TIMEOUT = float(env("GITHUB_TIMEOUT", "10"))
GITHUB_WRITES_PER_SECOND = float(env("GITHUB_WRITES_PER_SECOND", "1"))
CRCR_DISPATCH_MAX_ATTEMPTS = int(env("CRCR_DISPATCH_MAX_ATTEMPTS", "8"))
CRCR_DISPATCH_LEASE_SECONDS = int(env("CRCR_DISPATCH_LEASE_SECONDS", "180"))
CRCR_DISPATCH_RECONCILE_AFTER_SECONDS = int(env("CRCR_DISPATCH_RECONCILE_AFTER", "120"))
# The relay, part 2: check runs, the crcr/gate merge gate, re-runs and on-call comments on
# upstream PRs (hud.checks.mirror). Off, or without GITHUB_APP_ID, nothing is written to GitHub.
CRCR_CHECK_RUNS = env_bool("CRCR_CHECK_RUNS", True)
CRCR_ONCALL_COMMENTS = env_bool("CRCR_ONCALL_COMMENTS", True)
# The gate expects, per L4 backend, the jobs of its last CRCR_GATE_HISTORY_RUNS answered
# deliveries within CRCR_GATE_HISTORY_DAYS.
CRCR_GATE_HISTORY_DAYS = int(env("CRCR_GATE_HISTORY_DAYS", "14"))
CRCR_GATE_HISTORY_RUNS = int(env("CRCR_GATE_HISTORY_RUNS", "5"))
CRCR_MIRROR_MAX_ATTEMPTS = int(env("CRCR_MIRROR_MAX_ATTEMPTS", "10"))
CRCR_MIRROR_RECONCILE_AFTER_SECONDS = int(env("CRCR_MIRROR_RECONCILE_AFTER", "120"))
CRCR_MIRROR_WINDOW_SECONDS = int(env("CRCR_MIRROR_WINDOW", str(3 * 86400)))

# --- Metrics (GET /metrics) ---------------------------------------------------------------
# Unset: /metrics is open (restrict it at the proxy). Set: `Authorization: Bearer <token>`.
METRICS_TOKEN = env("METRICS_TOKEN")
# Where prometheus-client keeps per-process counters so gunicorn workers add up (see
# deploy/gunicorn.conf.py); unset = one process, counters in memory.
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR")

# --- Logging: one JSON object per line on stderr ------------------------------------------
LOG_LEVEL = env("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    # The request id (config.logging_context) goes on every record a handler writes.
    "filters": {"request_id": {"()": "config.logging_context.RequestIdFilter"}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["stderr"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Celery's pool (billiard) logs here without propagating ("a pool process exited").
        "multiprocessing": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
    },
}
# Python warnings become records of `py.warnings`, so they too are JSON lines in every process.
logging.captureWarnings(True)

# --- Sign-in with GitHub (django-allauth) ---------------------------------------------------
# Passwords stay for the embedded default and demo users; allauth's backend serves GitHub.
INSTALLED_APPS += [
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.github",
]
MIDDLEWARE += ["allauth.account.middleware.AccountMiddleware"]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
# An OAuth App (github.com → Settings → Developer settings); callback URL
# https://<this server>/accounts/github/login/callback/. Unset: no GitHub button.
GITHUB_OAUTH_CLIENT_ID = env("GITHUB_OAUTH_CLIENT_ID") or ""
GITHUB_OAUTH_CLIENT_SECRET = env("GITHUB_OAUTH_CLIENT_SECRET") or ""
# Where the OAuth pages and the user API live (tests point these at a local fake).
CRCR_GITHUB_OAUTH_URL = (env("CRCR_GITHUB_OAUTH_URL") or "https://github.com").rstrip("/")
CRCR_GITHUB_OAUTH_API_URL = (env("CRCR_GITHUB_OAUTH_API_URL") or "https://api.github.com").rstrip(
    "/"
)
# GitHub logins that are CRCR admins (the `crcr-admins` group is synced at each GitHub sign-in);
# unset: the group is managed by hand (Django admin) and sign-in leaves it alone.
CRCR_ADMIN_LOGINS = env_list("CRCR_ADMIN_LOGINS")
SOCIALACCOUNT_PROVIDERS = {
    "github": {
        # Reads the two URLs above at request time (allauth's own adapter fixes them at import).
        "provider_class": "hud.accounts.GitHubProvider",
        "SCOPE": ["read:user", "user:email"],
        # Configured here, not from SocialApp rows in the database.
        "APPS": (
            [{"client_id": GITHUB_OAUTH_CLIENT_ID, "secret": GITHUB_OAUTH_CLIENT_SECRET, "key": ""}]
            if GITHUB_OAUTH_CLIENT_ID
            else []
        ),
    }
}
ACCOUNT_ADAPTER = "hud.accounts.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "hud.accounts.SocialAccountAdapter"
# Identity is the GitHub account; addresses are not verified by mail or used to link accounts.
ACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_QUERY_EMAIL = True
SOCIALACCOUNT_STORE_TOKENS = False

# --- Notifications: email and Slack-compatible webhooks -------------------------------------
# Embedded default: mail is printed on stdout (console backend). Production: set EMAIL_HOST (SMTP)
# or EMAIL_BACKEND explicitly.
EMAIL_BACKEND = env("EMAIL_BACKEND") or (
    "django.core.mail.backends.smtp.EmailBackend"
    if env("EMAIL_HOST")
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = int(env("EMAIL_PORT", "25"))
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = int(env("EMAIL_TIMEOUT", "10"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "CRCR HUD <crcr-hud@localhost>")
SERVER_EMAIL = env("SERVER_EMAIL", DEFAULT_FROM_EMAIL)
# The server's public address, for links in notifications (e.g. https://hud.example.org).
CRCR_PUBLIC_URL = (env("CRCR_PUBLIC_URL") or "").rstrip("/")
CRCR_NOTIFY_WEBHOOK_TIMEOUT = float(env("CRCR_NOTIFY_WEBHOOK_TIMEOUT", "10"))
CRCR_NOTIFY_MAX_ATTEMPTS = int(env("CRCR_NOTIFY_MAX_ATTEMPTS", "8"))
# A backend with no result for this long is "stale"; this many unanswered L2+ dispatches in a
# row (each past CRCR_NO_RESPONSE_AFTER) is "silent"; this many failed L4 results in a row is
# "repeated gate failures".
CRCR_NOTIFY_STALE_HOURS = float(env("CRCR_NOTIFY_STALE_HOURS", "24"))
CRCR_NOTIFY_SILENT_DISPATCHES = int(env("CRCR_NOTIFY_SILENT_DISPATCHES", "3"))
CRCR_NOTIFY_GATE_FAILURES = int(env("CRCR_NOTIFY_GATE_FAILURES", "3"))
