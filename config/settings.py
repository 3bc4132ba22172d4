"""Settings, all from the environment (12-factor), with an embedded zero-install default.

- `DATABASE_URL`: default a SQLite file under `VAR_DIR` in WAL mode whose transactions begin
  IMMEDIATE, so a claim takes the write lock before it reads (docs/design.md#dispatcher), and whose
  commits are synced to disk (`synchronous=FULL`): an intent survives a power loss.
- `CELERY_BROKER_URL`: default an embedded filesystem broker whose folders sit beside the database.
- `SECRET_KEY`: required unless `DJANGO_DEBUG` is on, which allows a development default.
- `SIGNING_KEYS`: required, with `DJANGO_DEBUG` off, by a deployment that can span machines
  (PostgreSQL or a Redis broker): every process refuses to start without it
  (`dispatch.signing.missing_shared_keys`); the embedded default generates one into `VAR_DIR`.
- `DATABASE_PASSWORD`: the database's password when the URL holds none; as
  `DATABASE_PASSWORD_FILE`, the secret file PostgreSQL's image reads (docker-compose.yml).
- Any variable `X` may instead come from a file: `X_FILE` (config/environment.py).
- `ALLOWED_HOSTS`: comma-separated.
- HTTPS (`SECURE_SSL_REDIRECT`, HSTS, secure cookies): on unless `DJANGO_DEBUG`, each overridable;
  `SECURE_PROXY_SSL_HEADER` (`X-Forwarded-Proto,https`) and `CSRF_TRUSTED_ORIGINS` for a proxy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import environ
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.environment import FileOrEnvironment
from config.logging import logging_config
from config.process import process_kind

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()
env.ENVIRON = FileOrEnvironment(os.environ)  # `X_FILE` gives `X`: secrets from files

DEBUG: bool = env.bool("DJANGO_DEBUG", default=False)
VAR_DIR = Path(env.str("APP_VAR_DIR", default=str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY: str = env.str("SECRET_KEY", default="")
# Ed25519 signing keys, a JSON list of {"kid", "private"} (docs/audit-seal.md#keys). Empty: the
# embedded default generates one into VAR_DIR on first use; a deployment that can span machines
# refuses to start without them unless DEBUG (dispatch.signing.missing_shared_keys).
SIGNING_KEYS: str = env.str("SIGNING_KEYS", default="")
# The sealer seals events at least this many seconds old (longer than any write transaction),
# at most AUDIT_SEAL_BATCH per block (docs/audit-seal.md#sealing).
AUDIT_SEAL_LAG: float = env.float("AUDIT_SEAL_LAG", default=10.0)
AUDIT_SEAL_BATCH: int = env.int("AUDIT_SEAL_BATCH", default=1000)
# Each sealing pass appends its signed checkpoint to `<AUDIT_CHECKPOINT_DIR>/<tenant id>.jsonl`
# (outside the database: docs/audit-seal.md#checkpoints) and posts it to each of
# AUDIT_CHECKPOINT_WEBHOOKS, a JSON list of {"url": "https://…", "secret": "whsec_…"}.
AUDIT_CHECKPOINT_DIR: str = env.str("AUDIT_CHECKPOINT_DIR", default=str(VAR_DIR / "checkpoints"))


def _webhooks(name: str) -> list[dict[str, str]]:
    """A JSON list of {"url": "http(s)://…", "secret": "whsec_…"} from the environment."""
    hooks: Any = env.json(name, default=[])
    if not isinstance(hooks, list) or not all(
            isinstance(hook, dict) and set(hook) == {"url", "secret"}
            and str(hook["url"]).startswith(("http://", "https://"))
            and str(hook["secret"]).startswith("whsec_") for hook in hooks):
        raise ImproperlyConfigured(  # never echo the value: it holds secrets
            f'{name} must be a JSON list of {{"url": "http(s)://…", "secret": "whsec_…"}}')
    return hooks


AUDIT_CHECKPOINT_WEBHOOKS: list[dict[str, str]] = _webhooks("AUDIT_CHECKPOINT_WEBHOOKS")
# A permit token (docs/permit-tokens.md) expires this many seconds after its attempt's contract
# timeout: the destination refuses it after that.
PERMIT_TOKEN_MARGIN: int = env.int("PERMIT_TOKEN_MARGIN", default=60)
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY, or DJANGO_DEBUG=1 for a development default."
        )
    SECRET_KEY = "dev-only-insecure-key-never-use-in-production"  # noqa: S105 - DEBUG only

ALLOWED_HOSTS: list[str] = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])


# --- HTTPS: secure by default unless DEBUG (`manage.py check --deploy` passes) ------------------
def _proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto,https` -> ("HTTP_X_FORWARDED_PROTO", "https"); empty: no proxy."""
    if not raw:
        return None
    header, sep, value = raw.partition(",")
    header, value = header.strip(), value.strip()
    if not sep or not header or not value or "," in value:
        raise ImproperlyConfigured(
            "SECURE_PROXY_SSL_HEADER is HEADER,VALUE, e.g. X-Forwarded-Proto,https")
    name = header.upper().replace("-", "_")
    return (name if name.startswith("HTTP_") else f"HTTP_{name}"), value


SECURE_SSL_REDIRECT: bool = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_HSTS_SECONDS: int = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS: bool = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD: bool = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
SESSION_COOKIE_SECURE: bool = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE: bool = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
# Trust the proxy's word that the request came over HTTPS only when told which header says so.
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(env.str("SECURE_PROXY_SSL_HEADER", default=""))
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Modules with a `register(runtime)` function adding trusted contracts, their handlers and
# resource kinds (dispatch.runtime); each declares `EXTENSION_API = 1`. None by default: the
# demo of docs/design.md#demo runs only where asked for (`demo.extension`, as scripts/run.sh,
# docker-compose.yml and the test settings ask), and its app (its commands) comes with it.
DISPATCH_EXTENSIONS: list[str] = env.list("DISPATCH_EXTENSIONS", default=[])
# HTTP actions (docs/actions.md): a folder of `*.yaml`/`*.json` files, each one contract that
# calls a team's own service with the permit token; none by default. Every process refuses to
# start on an invalid file (`manage.py check_actions` says where). Their URLs must reach public
# addresses, as agents' webhooks must, unless the host is listed in ACTIONS_ALLOWED_HOSTS.
ACTIONS_DIR: str = env.str("ACTIONS_DIR", default="")
ACTIONS_ALLOWED_HOSTS: list[str] = env.list("ACTIONS_ALLOWED_HOSTS", default=[])
# The module that fires failpoints (dispatch/failpoints.py): none here, whatever the
# environment says; only the test settings name one.
FAILPOINTS: str = ""

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "csp",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI assets served locally, no CDN
    "dispatch",
    "console",
    *(["demo"] if "demo.extension" in DISPATCH_EXTENSIONS else []),
]

MIDDLEWARE = [
    # Every answer counted by route, method and status (config/middleware.py).
    "config.middleware.RequestMetricsMiddleware",
    # /healthz, /readyz and /metrics, answered before anything below (config/health.py).
    "config.health.OperationalMiddleware",
    # The request id and the request's log line (config/middleware.py).
    "config.middleware.RequestContextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# A strict Content-Security-Policy on every response (django-csp's middleware above): no inline
# script or style, no eval, no third-party origin. Scripts, styles and XHR (htmx polling) come
# from this origin only, forms post only here, and no page may be framed.
CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "DIRECTIVES": {
        "default-src": [NONE],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "font-src": [SELF],
        "connect-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "base-uri": [NONE],
    },
}

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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


def _database() -> dict[str, Any]:
    default_url = f"sqlite:///{VAR_DIR / 'console.sqlite3'}"
    db: dict[str, Any] = env.db_url("DATABASE_URL", default=default_url)
    password = env.str("DATABASE_PASSWORD", default="")
    if password:
        if db.get("PASSWORD"):
            raise ImproperlyConfigured(
                "DATABASE_URL holds a password and DATABASE_PASSWORD is set: set one of them.")
        db["PASSWORD"] = password
    if db["ENGINE"] == "django.db.backends.sqlite3":
        db["OPTIONS"] = {
            # Every transaction takes the write lock first: no read-then-upgrade deadlocks.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
        }
        # Tests race claims across OS processes, so the test database must be a file.
        db["TEST"] = {"NAME": str(VAR_DIR / env.str("SQLITE_TEST_NAME", default="test.sqlite3"))}
    else:
        # A new PostgreSQL connection costs a backend process and several milliseconds, more
        # than a whole claim. Statements are bound and prepared on the server, each prepared on
        # its second use on a connection (`DATABASE_PREPARE_THRESHOLD`; -1: never, and
        # client-side binding): the hot path's fixed statements are parsed and planned once per
        # connection (docs/design.md#dispatcher). Connections persist (CONN_MAX_AGE, health
        # checked), or, with `DATABASE_POOL=1`, come from a psycopg pool per process
        # (`DATABASE_POOL_MAX`). The pool is opt-in: a thread that ends holding a connection
        # (the MCP gateway's worker threads) never gives it back, and a capped pool then
        # refuses the next one after its timeout.
        # Each connection says which kind of process holds it (pg_stat_activity's
        # application_name): console-web, console-worker, console-reconcile, console-mcp, …
        # (config/process.py); an `application_name` in the URL's query wins.
        db["OPTIONS"] = {"application_name": env.str(
            "DATABASE_APPLICATION_NAME", default=process_kind(sys.argv)), **db.get("OPTIONS", {})}
        threshold = env.int("DATABASE_PREPARE_THRESHOLD", default=1)
        if threshold >= 0:
            db["OPTIONS"] = {**db.get("OPTIONS", {}), "server_side_binding": True,
                             "prepare_threshold": threshold}
        if env.bool("DATABASE_POOL", default=False):
            db["OPTIONS"] = {**db.get("OPTIONS", {}), "pool": {
                "min_size": 1, "max_size": env.int("DATABASE_POOL_MAX", default=4),
                "timeout": 30}}
            db["CONN_MAX_AGE"] = 0  # the pool keeps the connections
        else:
            db.setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=300))
            db.setdefault("CONN_HEALTH_CHECKS", True)
        if env.str("PG_TEST_NAME", default=""):
            db["TEST"] = {"NAME": env.str("PG_TEST_NAME")}
    db["ATOMIC_REQUESTS"] = False  # services own their transactions
    return db


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
# Checked by Django's password forms and commands, and by `create_human` unless DEBUG (so the
# demo and the tests may keep short passwords).
AUTH_PASSWORD_VALIDATORS: list[dict[str, Any]] = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Collected at build time in the image (Dockerfile) and served by WhiteNoise from there.
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles"))).resolve()

STATIC_ROOT.mkdir(parents=True, exist_ok=True)

LOGIN_URL = "/accounts/login/"
CSRF_FAILURE_VIEW = "console.views.csrf_failure"
LOGIN_REDIRECT_URL = "/console/"

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # docs/design.md#denials: bodies over 1 MiB are refused


# --- Caches ---------------------------------------------------------------------------------------
def _shared_cache() -> dict[str, Any]:
    """One store for every web worker: the database table `django_cache` (created by the
    console's migration), or Redis with `CACHE_URL=redis://…`."""
    cache: dict[str, Any] = env.cache_url("CACHE_URL", default="dbcache://django_cache")
    if cache["BACKEND"] == "django.core.cache.backends.db.DatabaseCache":
        # Culling would forget recorded failures; an attacker could force it with junk entries.
        cache.setdefault("OPTIONS", {})["MAX_ENTRIES"] = 1_000_000
    return cache


CACHES = {
    # Per process, for what one process may forget. Not the per-principal request rate: that
    # is one count in the database for every worker (dispatch.services.rates).
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Shared by every worker: the login throttle.
    "shared": _shared_cache(),
}

# Failed logins remembered per account and per client address for a window (console.login).
LOGIN_FAILURES_PER_ACCOUNT: int = env.int("LOGIN_FAILURES_PER_ACCOUNT", default=5)
LOGIN_FAILURES_PER_ADDRESS: int = env.int("LOGIN_FAILURES_PER_ADDRESS", default=20)
LOGIN_FAILURE_WINDOW: int = env.int("LOGIN_FAILURE_WINDOW", default=15 * 60)  # seconds
# Behind a reverse proxy, the header it puts the client's address in (its last entry counts);
# empty: the connection's own address (REMOTE_ADDR).
LOGIN_ADDRESS_HEADER: str = env.str("LOGIN_ADDRESS_HEADER", default="")

# --- Celery: the handler runs on a worker after the claim commits (docs/design.md#dispatcher) -----
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL: str = env.str("CELERY_BROKER_URL", default="filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # kombu's exchange table; its default is `control/` under the working directory.
        "control_folder": str(BROKER_DIR / "control"),
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith("redis"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # An unacknowledged task (its worker died) is redelivered after this many seconds;
        # the store, not the broker, decides whether the redelivered task may do anything.
        "visibility_timeout": env.int("BROKER_VISIBILITY_TIMEOUT", default=60),
        # Sweep for such abandoned tasks every few seconds (kombu's default is ~100 s).
        "unacked_restore_interval": 2,
        "unacked_restore_throttle": 1,
        "socket_timeout": 10,
        "health_check_interval": 10,
    }
CELERY_TASK_DEFAULT_QUEUE: str = env.str("CELERY_QUEUE", default="dispatch")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Short tasks: a worker takes a few ahead; a crash redelivers them, and the store refuses any
# attempt it does not allow, so nothing runs twice.
CELERY_WORKER_PREFETCH_MULTIPLIER: int = env.int("CELERY_WORKER_PREFETCH_MULTIPLIER", default=4)
# Keep a worker's database connection across tasks (Celery's Django fixup would close it around
# every task); config/celery.py applies CONN_MAX_AGE and the health check around each task, as
# Django does around a request.
CELERY_DB_REUSE_MAX: int = env.int("CELERY_DB_REUSE_MAX", default=1000)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_TASK_ALWAYS_EAGER: bool = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_BEAT_SCHEDULE = {
    "reconcile-operations": {"task": "dispatch.tasks.reconcile_operations", "schedule": 5.0},
    "reconcile-delegations": {"task": "dispatch.tasks.reconcile_delegations", "schedule": 10.0},
    "approvals-expire-stale": {"task": "dispatch.tasks.approvals_expire_stale", "schedule": 10.0},
    # A fallback only: a decision or an input wakes its executions at once (workflow_wake).
    "workflow-resume-stale": {"task": "dispatch.tasks.workflow_resume_stale", "schedule": 30.0},
    # A fallback only: the lane that ends last delivers its join (workflow_branch).
    "workflow-join-sweep": {"task": "dispatch.tasks.workflow_join_sweep", "schedule": 30.0},
    "notifications-due": {"task": "dispatch.tasks.notifications_due", "schedule": 5.0},
    "executions-expire": {"task": "dispatch.tasks.executions_expire", "schedule": 2.0},
    "scopes-sweep": {"task": "dispatch.tasks.scopes_sweep", "schedule": 10.0},
    "audit-seal": {"task": "dispatch.tasks.audit_seal", "schedule": 5.0},
}

# --- The demo's own settings (its destinations, the fetch allow-list): demo/settings.py ---
if "demo.extension" in DISPATCH_EXTENSIONS:
    from demo.settings import demo_destinations, demo_source_allowlist

    DESTINATIONS: dict[str, Any] = demo_destinations(env, VAR_DIR)
    EVIDENCE_SOURCE_ALLOWLIST: list[str] = demo_source_allowlist(env)

# --- Policy ---------------------------------------------------------------------------------------
# Deployment policy: effects this deployment allows at all (docs/design.md#dispatcher step 3/4).
DEPLOYMENT_ALLOWED_EFFECTS: list[str] = env.list(
    "DEPLOYMENT_ALLOWED_EFFECTS", default=["read", "external_write", "financial_write", "human"]
)
# Approval rules by operation and argument (docs/design.md#approval-policies): a JSON list such as
# [{"operation": "payments.transfer", "when": {"amount": {"gte": "10000.00"},
#   "currency": {"eq": "EUR"}}, "quorum": 2}]; checked against the contracts at start-up.
# Part of the policy fingerprint: a rule changed between a proposal and its dispatch refuses it.
APPROVAL_RULES: Any = env.json("APPROVAL_RULES", default=[])
# Argument and payload fields redacted before anything reaches the audit (docs/design.md#audit).
AUDIT_REDACT_FIELDS: list[str] = env.list(
    "AUDIT_REDACT_FIELDS", default=["password", "secret", "token", "api_key", "authorization"]
)
# Budgets reserved before a claim (docs/design.md#budgets): tool calls per principal per hour and
# per execution.
BUDGET_TOOL_CALLS_PER_PRINCIPAL: int = env.int("BUDGET_TOOL_CALLS_PER_PRINCIPAL", default=1000)
BUDGET_TOOL_CALLS_PER_EXECUTION: int = env.int("BUDGET_TOOL_CALLS_PER_EXECUTION", default=100)
# Attempts (first attempts and retries) one workflow run may start: its root scope's ceiling
# (docs/design.md#budgets).
BUDGET_ATTEMPTS_PER_EXECUTION: int = env.int("BUDGET_ATTEMPTS_PER_EXECUTION", default=300)
# Attempts in flight at once a workflow run's root scope holds (what its nested scopes reserve).
CONCURRENCY_PER_EXECUTION: int = env.int("CONCURRENCY_PER_EXECUTION", default=16)
# Operations of one principal claimed and not yet settled at once (its attempts in flight,
# docs/workflows.md#ceilings); a claim beyond it is `budget_exhausted` naming `concurrency`.
# 0 (the default): no limit. On, it costs the claim one statement (the count).
CONCURRENT_OPERATIONS_PER_PRINCIPAL: int = env.int("CONCURRENT_OPERATIONS_PER_PRINCIPAL",
                                                   default=0)
# Model tokens one agent execution may use (0: no limit, usage is only accounted). A hard
# limit holds only for an adapter that declares a per-call maximum (`max_tokens_per_call`):
# that maximum is reserved before each model call and the unused part returned after it.
BUDGET_MODEL_TOKENS_PER_EXECUTION: int = env.int("BUDGET_MODEL_TOKENS_PER_EXECUTION", default=0)

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "dispatch.api.schema.ApiAutoSchema",
    # Bearer tokens first: a present but bad token fails closed, never falls back to a session.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "dispatch.api.authentication.BearerAuthentication",
        "dispatch.api.authentication.PrincipalSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Strict UTF-8 JSON only (docs/design.md#denials); anything else is 415.
    "DEFAULT_PARSER_CLASSES": ["dispatch.api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "dispatch.api.exceptions.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["dispatch.api.throttling.PrincipalRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "principal": env.str("API_RATE_PER_PRINCIPAL", default="600/minute"),
    },
    "DEFAULT_METADATA_CLASS": None,  # OPTIONS is not part of the API: 405
    "UNICODE_JSON": True,
    "STRICT_JSON": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Exact-action approval console API",
    "VERSION": "1.0.0",
    "DESCRIPTION": (
        "Agents propose exact actions; humans approve the canonical snapshot; the dispatcher "
        "runs only what was approved. Every refusal is "
        '`{"error": {"code", "message", "details"}}` with a stable code (docs/design.md#denials).'
    ),
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # Enums stay inline where they are used: states of different records share field names.
    "POSTPROCESSING_HOOKS": [],
    # Swagger UI from the installed sidecar package when it is an installed app (no CDN).
    **({"SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
        "REDOC_DIST": "SIDECAR"} if "drf_spectacular_sidecar" in INSTALLED_APPS else {}),
}

# JSON lines on stderr with the request's and the action's ids (config/logging.py);
# `LOG_FORMAT=console` for a person to read (the default under DJANGO_DEBUG).
LOG_FORMAT: str = env.str("LOG_FORMAT", default="console" if DEBUG else "json")
LOG_LEVEL: str = env.str("LOG_LEVEL", default="INFO")
LOGGING = logging_config(LOG_FORMAT, LOG_LEVEL)
# /metrics answers only `Authorization: Bearer <METRICS_TOKEN>` when it is set (config/health.py).
METRICS_TOKEN: str = env.str("METRICS_TOKEN", default="")
# Touched by a worker at each Celery worker heartbeat and by `reconcile --every` after each pass:
# their liveness probe reads its age (deploy/probe.py, docs/deployment.md#probes). Empty: none.
HEARTBEAT_FILE: str = env.str("HEARTBEAT_FILE", default=str(VAR_DIR / "heartbeat"))

# A Celery worker's own scrape of its tasks' series (config/celery.py), off unless a port is set;
# docker-compose.yml listens on the worker's network address, never published.
WORKER_METRICS_PORT: int = env.int("WORKER_METRICS_PORT", default=0)
WORKER_METRICS_ADDRESS: str = env.str("WORKER_METRICS_ADDRESS", default="127.0.0.1")

# Upper bound on one destination call, below the contract timeout (tests shorten it).
HANDLER_TIMEOUT_CAP: float = env.float("HANDLER_TIMEOUT_CAP", default=15.0)
# Pause between same-key retries of a receiver_dedup operation, doubled per attempt.
RETRY_BACKOFF_SECONDS: float = env.float("RETRY_BACKOFF_SECONDS", default=0.5)
# The longest wait between two attempts under one key, the jittered backoff's cap and the
# longest `Retry-After` a destination is granted (protocols/backoff.py).
RETRY_BACKOFF_MAX_SECONDS: float = env.float("RETRY_BACKOFF_MAX_SECONDS", default=30.0)

# --- Reconciliation (docs/design.md#reconciliation): bounded, one pass at a time ------------------
RECONCILE_BATCH: int = env.int("RECONCILE_BATCH", default=500)  # operations of each state per pass
RECONCILE_LOOKUP_TIMEOUT: float = env.float("RECONCILE_LOOKUP_TIMEOUT", default=10.0)  # seconds
# How long a cancellation that finds an attempt in flight waits for that attempt's answer, so
# that what it returns is terminal where the handler stops on its cancelled context
# (docs/design.md#cancellation).
CANCEL_WAIT_SECONDS: float = env.float("CANCEL_WAIT_SECONDS", default=5.0)
# An approved `dispatch_on_approval` permit still unclaimed this long after its grant had its
# worker task lost: reconciliation enqueues it again (docs/design.md#write-transactions).
RECONCILE_UNCLAIMED_GRACE_SECONDS: float = env.float("RECONCILE_UNCLAIMED_GRACE_SECONDS",
                                                     default=30.0)
# Seconds a reconciliation lease lasts from a pass's last operation: how long a dead pass's
# lock holds. Keep it above RECONCILE_LOOKUP_TIMEOUT (one operation's lookup).
RECONCILE_LEASE_SECONDS: float = env.float("RECONCILE_LEASE_SECONDS", default=30.0)
# Seconds a delegated workflow step's lease lasts (docs/design.md#delegation), renewed every
# sub-agent turn: once it lapses, reconciliation revokes the step's grant (its worker is taken for
# dead). Keep it above the longest turn: a model call plus a handler within its contract timeout.
DELEGATION_LEASE_SECONDS: float = env.float("DELEGATION_LEASE_SECONDS", default=120.0)

# --- The MCP gateway (docs/mcp.md) ----------------------------------------------------------------
# Seconds a `tools/call` that needs no task waits for the action to settle (approval included)
# before it answers `approval_pending` or the operation as it stands.
MCP_WAIT_SECONDS: float = env.float("MCP_WAIT_SECONDS", default=30.0)
# The names `tools/list` gives: `qualified` (default, docs/mcp.md#tools: `email.send`) or
# `model`, the names every model API takes as a function's name (`email_send`,
# docs/mcp.md#names). A call by either name works whatever this says.
MCP_TOOL_NAMES: str = env.str("MCP_TOOL_NAMES", default="qualified")
if MCP_TOOL_NAMES not in ("qualified", "model"):
    raise ImproperlyConfigured(f"MCP_TOOL_NAMES={MCP_TOOL_NAMES!r}: use qualified or model")
# The console's address as people reach it (through its proxy or load balancer), never the API
# address an agent happens to use: the approval links handed to agents (the REST proposal's
# `approval.url`, the MCP gateway's `approval_url`, the client's adapters) and approvers' emails.
# Unset: the REST API gives no link (the client builds one from its own address), the gateway and
# emails use http://127.0.0.1:8000. `CONSOLE_BASE_URL` is its former name, still read.
CONSOLE_PUBLIC_URL: str = (env.str("CONSOLE_PUBLIC_URL", default="")
                           or env.str("CONSOLE_BASE_URL", default=""))
# The largest MCP request body taken, in bytes; a larger one is 413.
MCP_MAX_BODY_BYTES: int = env.int("MCP_MAX_BODY_BYTES", default=1024 * 1024)

# --- Notifications (docs/design.md#notifications) ------------------------------------------------
# Attempts at delivering one notification before it is given up (`failed`), and the first retry's
# delay in seconds: each further retry waits twice as long.
NOTIFY_MAX_ATTEMPTS: int = env.int("NOTIFY_MAX_ATTEMPTS", default=5)
NOTIFY_BACKOFF_SECONDS: float = env.float("NOTIFY_BACKOFF_SECONDS", default=10.0)
# Seconds one delivery may take (connect and every wait for the receiver's answer).
NOTIFY_TIMEOUT_SECONDS: float = env.float("NOTIFY_TIMEOUT_SECONDS", default=10.0)
# Seconds a worker holds a claimed notification: past it, one that died is taken for dead and the
# beat sweep delivers the notification again (under the same webhook-id).
NOTIFY_CLAIM_SECONDS: float = env.float("NOTIFY_CLAIM_SECONDS", default=60.0)
# The approvers' email goes over SMTP to `NOTIFY_SMTP` ("host:port"); unset, to the demo's SMTP
# destination when the demo is installed; with neither, no email is sent.
NOTIFY_SMTP: str = env.str("NOTIFY_SMTP", default="")
NOTIFY_EMAIL_FROM: str = env.str("NOTIFY_EMAIL_FROM", default="approvals@console.example")
# Webhooks that hear every approval request of the deployment, each signed with its own
# Standard Webhooks secret: a JSON list of {"url": "https://…", "secret": "whsec_…"}.
NOTIFY_WEBHOOKS: list[dict[str, str]] = _webhooks("NOTIFY_WEBHOOKS")
# Whether an agent may register a webhook on a loopback, private or link-local address. Delivery
# goes where the agent says: keep this off in production (a webhook must not reach the
# deployment's own network); the demo and the tests, under DJANGO_DEBUG, listen on loopback.
WEBHOOK_ALLOW_PRIVATE: bool = env.bool("WEBHOOK_ALLOW_PRIVATE", default=DEBUG)

