"""Settings for the recovery console, read from the environment (API.md lists the variables)."""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONSOLE_VAR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


DEBUG = env_bool("DEBUG", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "insecure-dev-key-only-for-debug-" + "x" * 32

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()]
if DEBUG:
    ALLOWED_HOSTS += ["testserver"]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.humanize",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "channels",
    "axes",
    "tasks",
    "recovery",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # NUL or lone surrogates in a URL, header, cookie or form: 400 before any view looks anything up.
    "console.middleware.PlainTextInputMiddleware",
    # A view that waited out the database connection pool: 503 database_busy, not a 500.
    "console.middleware.DatabaseBusyMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_permissions_policy.PermissionsPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the console's lockout page.
    "axes.middleware.AxesMiddleware",
]

# Sign-in throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords for one username from one
# address, that pair is locked for AXES_COOLOFF_TIME; a success resets the count. Attempts are rows in the
# database, so every web process sees the same count. Admins unlock on /settings/sign-in/ (or axes_reset_username).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("CONSOLE_LOGIN_FAILURES", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CONSOLE_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "console.views.accounts.lockout"
AXES_HTTP_RESPONSE_CODE = 429
# The address is REMOTE_ADDR: behind the proxy, `daphne --proxy-headers` sets it from X-Forwarded-For.

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

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
                "console.alerts.header_alerts",
                "django.template.context_processors.csp",
                "console.views.triage.nav_counts",
            ],
        },
    },
]

# The embedded default is a SQLite file shared by web, worker and supervisor:
# WAL plus IMMEDIATE transactions make writers queue instead of failing.
# CONSOLE_SQLITE_TIMEOUT is how long a writer waits for SQLite's one write lock before "database is locked".
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": float(os.environ.get("CONSOLE_SQLITE_TIMEOUT") or 30),
}

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'console.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A fresh clone has no var/ yet; SQLite cannot create a file in a missing directory.
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = dict(SQLITE_OPTIONS)
    DATABASES["default"]["TEST"] = {
        # The live server in browser tests is another process: it needs a file.
        "NAME": os.environ.get("CONSOLE_SQLITE_TEST_NAME", str(VAR_DIR / "test.sqlite3")),
    }
else:
    # A database that does not answer fails a request (and /healthz) in seconds, not minutes.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
    # Connections are reused through psycopg's pool, one per process shared by its threads (Django's
    # advice under ASGI, where persistent per-thread connections would leak with the executor's threads):
    # a request no longer opens a connection of its own. CONSOLE_DB_POOL=0 turns it off (e.g. behind
    # pgbouncer); CONSOLE_DB_POOL_MAX bounds each process's connections. Every request runs in a thread of
    # its own and holds its connection until it answers, so a burst (200 pages reconnecting after a deploy)
    # wants more connections than the pool has: a request queues for one up to CONSOLE_DB_POOL_TIMEOUT
    # seconds, then is answered 503 `database_busy` (console.middleware). /healthz waits only
    # console.ops_api.HEALTH_POOL_TIMEOUT, so a database that is gone still fails it in seconds; the pool keeps
    # reconnecting in the background rather than in the request.
    if env_bool("CONSOLE_DB_POOL", True):
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": env_int("CONSOLE_DB_POOL_MAX", 20),
            "timeout": float(os.environ.get("CONSOLE_DB_POOL_TIMEOUT") or 15),
        }
    test_name = os.environ.get("CONSOLE_PG_TEST_NAME")
    if test_name:
        DATABASES["default"]["TEST"] = {"NAME": test_name}

# The named one-statement paths (tasks/sql: the claim, the checkpoint's writes) are server-side prepared statements,
# parsed and planned once per connection (pooled connections keep them); Django's own queries never are. Behind a
# pooler that cannot carry prepared statements (pgbouncer in transaction mode before 1.21): CONSOLE_DB_PREPARE=0.
CONSOLE_DB_PREPARE = env_bool("CONSOLE_DB_PREPARE", True)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Static files are served from the finders; set CONSOLE_STATIC_ROOT only to collect them.
STATIC_ROOT = os.environ.get("CONSOLE_STATIC_ROOT") or None
# Serve straight from the finders: no collectstatic step to forget.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# A refused form (missing or stale CSRF token) is the console's own refusal page.
CSRF_FAILURE_VIEW = "console.views.refusals.csrf_failure"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Behind plain http (make run, the browser tests' live server) secure cookies
# would break sign-in; everywhere else they default on.
HTTPS = env_bool("CONSOLE_HTTPS", not DEBUG)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS and env_bool("CONSOLE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = 31536000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# A load balancer probes /healthz over plain http on the private side.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (Django's own, django.middleware.csp): scripts and styles only from this origin
# or with the response's nonce (the admin's templates carry it); no inline script, handler or style
# attribute anywhere in the console (tests/browser/test_headers.py fails on any violation the browser reports).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],  # the live pages' websockets: same origin (ws:/wss:)
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
# Permissions-Policy (django-permissions-policy): the console uses none of these browser features.
PERMISSIONS_POLICY = {
    feature: []
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "encrypted-media",
        "fullscreen",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "picture-in-picture",
        "publickey-credentials-get",
        "screen-wake-lock",
        "usb",
        "xr-spatial-tracking",
    )
}

# Checkpoint payloads (and so request bodies) are bounded at 8 MiB; leave room
# for the JSON envelope so the 413 comes from our own check with its code.
CONSOLE_MAX_PAYLOAD = 8 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = CONSOLE_MAX_PAYLOAD + 64 * 1024

CONSOLE_URL = os.environ.get("CONSOLE_URL", "http://127.0.0.1:8000")
CONSOLE_WORKER_TOKEN = os.environ.get("CONSOLE_WORKER_TOKEN", "")
CONSOLE_WORKSPACES = Path(os.environ.get("CONSOLE_WORKSPACES", VAR_DIR / "workspaces"))
# The deployment's export area: the only directories (os.pathsep-separated) under which an organization's admin
# may add export roots, and so the only places an export ever writes (tasks/export_roots.py).
CONSOLE_EXPORTS = [
    Path(p) for p in (os.environ.get("CONSOLE_EXPORTS") or str(VAR_DIR / "exports")).split(os.pathsep) if p.strip()
]
CONSOLE_EXPORT_ROOTS_MAX = 50
# An export claimed this long ago and never recorded was cut off (its supervisor died mid-copy): another takes it.
CONSOLE_EXPORT_STALE_SECONDS = env_int("CONSOLE_EXPORT_STALE_SECONDS", 1800)
CONSOLE_LEASE_SECONDS = env_int("CONSOLE_LEASE_SECONDS", 180)
CONSOLE_HEARTBEAT_SECONDS = env_int("CONSOLE_HEARTBEAT_SECONDS", 30)
# A worker instance's claim polls are recorded at most this often (tasks.worker_instances `poll_due`).
CONSOLE_INSTANCE_POLL_SECONDS = float(os.environ.get("CONSOLE_INSTANCE_POLL_SECONDS") or 1)
CONSOLE_SUPERVISE_SECONDS = env_int("CONSOLE_SUPERVISE_SECONDS", 5)
# The recovery breaker (DESIGN §14): more than TASKS tasks of one agent opening recovery with one failure signature
# within WINDOW seconds open it; COOLOFF seconds after it (re)opened it half-opens and lets one continuation try.
CONSOLE_BREAKER_TASKS = env_int("CONSOLE_BREAKER_TASKS", 10)
CONSOLE_BREAKER_WINDOW_SECONDS = env_int("CONSOLE_BREAKER_WINDOW_SECONDS", 600)
CONSOLE_BREAKER_COOLOFF_SECONDS = env_int("CONSOLE_BREAKER_COOLOFF_SECONDS", 900)
CONSOLE_CHAIN_MAX_RUNS = 32
# Live updates: how often the relay tails events when nothing woke it (0 = the
# database's default: 2 s on PostgreSQL, which NOTIFY wakes, 0.3 s on SQLite),
# and how often a socket re-reads its user's access as a safety net.
CONSOLE_RELAY_POLL_SECONDS = float(os.environ.get("CONSOLE_RELAY_POLL_SECONDS") or 0)
CONSOLE_LIVE_RECHECK_SECONDS = float(os.environ.get("CONSOLE_LIVE_RECHECK_SECONDS") or 3)
CONSOLE_CHECKPOINT_RETENTION_DAYS = env_int("CONSOLE_CHECKPOINT_RETENTION_DAYS", 30)
# A worker asked to stop (SIGTERM) finishes or abandons its current step within this many seconds.
CONSOLE_WORKER_DRAIN_SECONDS = float(os.environ.get("CONSOLE_WORKER_DRAIN_SECONDS") or 10)
# A scrape token for /metrics (sent as `Authorization: Bearer <token>`); an admin's API token works too.
CONSOLE_METRICS_TOKEN = os.environ.get("CONSOLE_METRICS_TOKEN", "")
# Recorded workspace files up to this size keep their content (diffs, isolated reissue).
CONSOLE_WORKSPACE_KEEP_BYTES = env_int("CONSOLE_WORKSPACE_KEEP_BYTES", 16 * 1024 * 1024)
# A walk of a workspace takes at most this many entries (in path order); what lies beyond is neither recorded
# nor taken as deleted. A file over HASH_MAX_BYTES is never read: it is recorded and compared by its size,
# times and inode. A request or a supervisor pass reads at most HASH_BUDGET bytes of content in all.
CONSOLE_WORKSPACE_MAX_ENTRIES = env_int("CONSOLE_WORKSPACE_MAX_ENTRIES", 100_000)
CONSOLE_WORKSPACE_HASH_MAX_BYTES = env_int("CONSOLE_WORKSPACE_HASH_MAX_BYTES", 256 * 1024 * 1024)
CONSOLE_WORKSPACE_HASH_BUDGET = env_int("CONSOLE_WORKSPACE_HASH_BUDGET", 1024 * 1024 * 1024)
# Bulk operations: items the supervisor settles per batch (one progress event each), how long a preview
# may be confirmed, and the most tasks one operation holds.
CONSOLE_BULK_BATCH = env_int("CONSOLE_BULK_BATCH", 50)
CONSOLE_BULK_PREVIEW_SECONDS = env_int("CONSOLE_BULK_PREVIEW_SECONDS", 900)
CONSOLE_BULK_MAX_ITEMS = env_int("CONSOLE_BULK_MAX_ITEMS", 100_000)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tasks.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The server-side boundary of the payload encoding (tasks/payloads.py): strict, bounded, canonical.
    "DEFAULT_RENDERER_CLASSES": ["tasks.parsers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["tasks.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "tasks.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "tasks.schemas.ConsoleAutoSchema",
    "UNAUTHENTICATED_USER": None,
    # Per person, counted in the database cache so every web process shares one count (tasks/throttles.py).
    "DEFAULT_THROTTLE_RATES": {
        "messages": os.environ.get("CONSOLE_MESSAGE_RATE") or "20/min",
        "notes": os.environ.get("CONSOLE_NOTE_RATE") or "30/min",
    },
}

# The cache holds rate-limit counts only; it is a database table (created by migration tasks 0009) so that
# every web process, on any machine, counts the same requests.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "console_cache",
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    }
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Recovery console API",
    "DESCRIPTION": (
        "Operator API and runner API of the recovery console.\n\n"
        "Payloads (tool arguments and results, run input) are JSON in a wire form whose strings and keys are plain "
        "text. An object whose only key is `$text` holds a string with NUL or a lone surrogate (its JSON escape "
        'form, ASCII, without quotes: `{"$text": "a\\\\u0000b"}`); `$bytes` holds bytes as base64; `$object` holds '
        "[key, value] pairs of an object whose keys are not plain text or that would read as a tag. Plain JSON "
        "with such strings is accepted and answered in this canonical form. Errors are "
        '`{"code", "detail", ...}` with a stable code.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {
        "RecoveryModeEnum": "tasks.models.RecoveryMode",
        "BulkStatusEnum": "recovery.models.BulkStatus",
        "RelayStatusEnum": "console.ops_api.RELAY_STATUSES",
        "NoticeTypeEnum": "recovery.models.NOTICE_TYPES",
        "DestinationKindEnum": ["webhook", "apprise"],
        "RunKindEnum": ["plan", "agent"],
    },
}

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    "loggers": {
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        "console": {"level": os.environ.get("LOG_LEVEL", "INFO")},
        "tasks": {"level": os.environ.get("LOG_LEVEL", "INFO")},
        "recovery": {"level": os.environ.get("LOG_LEVEL", "INFO")},
    },
}
