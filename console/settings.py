"""Settings for the recovery console, read from the environment (API.md lists the variables)."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

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
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
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
                "console.ops.header_alerts",
            ],
        },
    },
]

# The embedded default is a SQLite file shared by web, worker and supervisor:
# WAL plus IMMEDIATE transactions make writers queue instead of failing.
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
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
    # pgbouncer); CONSOLE_DB_POOL_MAX bounds each process's connections. A request waits at most
    # CONSOLE_DB_POOL_TIMEOUT seconds for a connection: a database that is gone still fails it (and /healthz)
    # in seconds, since the pool keeps reconnecting in the background rather than in the request.
    if env_bool("CONSOLE_DB_POOL", True):
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": env_int("CONSOLE_DB_POOL_MAX", 20),
            "timeout": float(os.environ.get("CONSOLE_DB_POOL_TIMEOUT") or 2),
        }
    test_name = os.environ.get("CONSOLE_PG_TEST_NAME")
    if test_name:
        DATABASES["default"]["TEST"] = {"NAME": test_name}

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
CSRF_FAILURE_VIEW = "console.views.csrf_failure"

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

# Checkpoint payloads (and so request bodies) are bounded at 8 MiB; leave room
# for the JSON envelope so the 413 comes from our own check with its code.
CONSOLE_MAX_PAYLOAD = 8 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = CONSOLE_MAX_PAYLOAD + 64 * 1024

CONSOLE_URL = os.environ.get("CONSOLE_URL", "http://127.0.0.1:8000")
CONSOLE_WORKER_TOKEN = os.environ.get("CONSOLE_WORKER_TOKEN", "")
CONSOLE_WORKSPACES = Path(os.environ.get("CONSOLE_WORKSPACES", VAR_DIR / "workspaces"))
CONSOLE_LEASE_SECONDS = env_int("CONSOLE_LEASE_SECONDS", 180)
CONSOLE_HEARTBEAT_SECONDS = env_int("CONSOLE_HEARTBEAT_SECONDS", 30)
CONSOLE_SUPERVISE_SECONDS = env_int("CONSOLE_SUPERVISE_SECONDS", 5)
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

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tasks.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "tasks.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Recovery console API",
    "DESCRIPTION": "Operator API and runner API of the recovery console.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {"RecoveryModeEnum": "tasks.models.RecoveryMode"},
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
