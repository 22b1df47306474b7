"""Quotaweb's one settings module, read from the environment (docs/architecture.md, Settings).

With no environment at all it runs embedded: SQLite in WAL mode, the in-memory channel
layer, the scheduling cycle and the executors inside the server process, bound to
127.0.0.1, with a secret key generated into the data folder.  DATABASE_URL switches to
PostgreSQL; REDIS_URL to channels-redis and Celery, and then SECRET_KEY and ALLOWED_HOSTS
must be given.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

from . import env
from .executors.slurm.config import build_map as build_slurm_map
from .private_data import private_file, private_folder, private_sqlite, write_private

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env.string("QUOTAWEB_DATA_DIR", str(BASE_DIR / "data")) or BASE_DIR / "data")

DATABASE_URL = env.string("DATABASE_URL")
REDIS_URL = env.string("REDIS_URL")
EMBEDDED = REDIS_URL is None
HTTPS = env.boolean("QUOTAWEB_HTTPS", False)


def _embedded_secret_key() -> str:
    """A key generated once into the data folder, so sessions survive restarts."""
    path = private_folder(DATA_DIR) / "secret_key"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(50))
    return private_file(path).read_text().strip()


if EMBEDDED:
    SECRET_KEY = env.string("SECRET_KEY") or _embedded_secret_key()
    DEBUG = env.boolean("DEBUG", False)
    ALLOWED_HOSTS = env.csv("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
else:
    SECRET_KEY = env.required("SECRET_KEY", "when REDIS_URL is set (distributed mode)")
    DEBUG = env.boolean("DEBUG", False)
    ALLOWED_HOSTS = env.csv("ALLOWED_HOSTS", [])
    if not ALLOWED_HOSTS:
        env.required("ALLOWED_HOSTS", "when REDIS_URL is set (distributed mode)")

CSRF_TRUSTED_ORIGINS = env.csv("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # for the Swagger UI files it ships, served from static/ (no CDN)
    "axes",  # sign-in throttling: see AXES_* below
    "quotaweb",
]

# Django's CSRF check looks for its middleware by class name; quotaweb.asgi_middleware
# checks for its async-capable subclass instead (quotaweb.W003).
SILENCED_SYSTEM_CHECKS = ["security.W003"]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "quotaweb.asgi_middleware.StaticFilesMiddleware",  # WhiteNoise, async-capable
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "quotaweb.middleware.refuse_unstorable_text",
    "quotaweb.middleware.content_security_policy",
    "quotaweb.asgi_middleware.CsrfMiddleware",  # Django's, async-capable
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out sign-in with its lockout page.
    "axes.middleware.AxesMiddleware",
]

# What a bearer-token request to /api/ passes through under WSGI (quotaweb/wsgi.py): the
# same stack, in the same order, without what only a browser's session needs.  The API
# judges such a request by its token alone (quotaweb/api/auth.py).
SESSION_ONLY_MIDDLEWARE = {
    "quotaweb.asgi_middleware.StaticFilesMiddleware",  # /static/ only
    "django.contrib.sessions.middleware.SessionMiddleware",
    "quotaweb.asgi_middleware.CsrfMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "axes.middleware.AxesMiddleware",  # sign-in lockouts
}
API_BEARER_MIDDLEWARE = [path for path in MIDDLEWARE if path not in SESSION_ONLY_MIDDLEWARE]

# Sign-in throttling (django-axes): after QUOTAWEB_SIGN_IN_FAILURE_LIMIT failed sign-ins for
# one username from one address, further sign-ins for that username from that address are
# refused with 429 until QUOTAWEB_SIGN_IN_WINDOW_SECONDS have passed since the last failure;
# the right password then signs in again.  Counting the two together means that a stranger
# who tries a user's name from an address of their own pauses it there only, never for the
# user everywhere (QUOTAWEB_SIGN_IN_LOCK_BY changes what is counted: README).  Failures are
# kept in the database, so every web process counts the same ones.  Bearer tokens do not
# sign in and are not counted.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.integer("QUOTAWEB_SIGN_IN_FAILURE_LIMIT", 5, low=1)
AXES_COOLOFF_TIME = timedelta(seconds=env.integer("QUOTAWEB_SIGN_IN_WINDOW_SECONDS", 900, low=1))
AXES_LOCKOUT_PARAMETERS = env.lockout("QUOTAWEB_SIGN_IN_LOCK_BY", "username+address")
AXES_RESET_ON_SUCCESS = True
# Tries during the pause do not prolong it: the window is what the setting says.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
AXES_CLIENT_IP_CALLABLE = "quotaweb.sign_in.client_address"

ROOT_URLCONF = "quotaweb.urls"
ASGI_APPLICATION = "quotaweb.asgi.application"
# The distributed mode serves HTTP with gunicorn (quotaweb/gunicorn_conf.py) and the
# websockets with Daphne, behind nginx (deploy/nginx); the embedded mode serves both with Daphne.
WSGI_APPLICATION = "quotaweb.wsgi.application"

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

if DATABASE_URL:
    DATABASES = {
        "default": env.database(
            DATABASE_URL, pool_size=env.integer("DATABASE_POOL_SIZE", 10, low=0)
        )
    }
else:
    # The database holds the sessions: the folder and the files are the server's alone,
    # made so here at every start (quotaweb/private_data.py).
    private_folder(DATA_DIR)
    SQLITE_PATH = Path(env.string("QUOTAWEB_SQLITE_PATH", str(DATA_DIR / "quotaweb.sqlite3"))
                       or DATA_DIR / "quotaweb.sqlite3")
    private_sqlite(SQLITE_PATH)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(SQLITE_PATH),
            # WAL lets readers proceed while the cycle writes; the busy timeout makes a
            # writer wait for the lock instead of failing at once.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    CHANNEL_LAYERS = {"default": env.redis_channel_layer(REDIS_URL)}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery (distributed mode only): the tick has its own queue so job work never delays it.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ROUTES = {
    "quotaweb.tasks.tick": {"queue": "tick"},
    "quotaweb.tasks.start_attempt": {"queue": "executor"},
    "quotaweb.tasks.refresh_estimates": {"queue": "forecast"},
    "quotaweb.tasks.prune_logs": {"queue": "forecast"},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

QUOTAWEB = {
    "PREEMPTION_GRACE_SECONDS": env.integer("QUOTAWEB_PREEMPTION_GRACE_SECONDS", 30),
    "WARM_POOL_MAX_LIFETIME_SECONDS": env.integer(
        "QUOTAWEB_WARM_POOL_MAX_LIFETIME_SECONDS", 2_419_200, low=1),
    # Fair sharing of idle capacity on every unit (docs/semantics.md 5.4); off: first come.
    "FAIR_SHARING": env.boolean("QUOTAWEB_FAIR_SHARING", False),
    # With a half-life, fair sharing also counts decayed past borrowing (semantics.md 5.4).
    "FAIR_SHARE_HALF_LIFE_SECONDS": env.integer("QUOTAWEB_FAIR_SHARE_HALF_LIFE_SECONDS", 0),
    "TICK_SECONDS": 1,
    # How often the queued jobs' estimated starts are refreshed (in the background).
    "FORECAST_SECONDS": env.integer("QUOTAWEB_FORECAST_SECONDS", 5, low=1),
    "HEARTBEAT_LEASE_SECONDS": env.integer("QUOTAWEB_HEARTBEAT_LEASE_SECONDS", 30, low=1),
    # A bearer token found is trusted this long per web process: a revocation or a user
    # deactivated in another process counts within it, in this one at once (0: read the
    # token on every request; quotaweb/api/token_cache.py).
    "AUTH_CACHE_SECONDS": env.integer("QUOTAWEB_AUTH_CACHE_SECONDS", 5, low=0),
    # GET /metrics: scraped with this bearer token, or from these addresses without one.
    "METRICS_TOKEN": env.string("QUOTAWEB_METRICS_TOKEN") or None,
    "METRICS_ALLOW": env.networks("QUOTAWEB_METRICS_ALLOW", ["127.0.0.1", "::1"]),
    # The local executor runs commands: on only where it is switched on (always embedded).
    "LOCAL_EXECUTOR": env.boolean("QUOTAWEB_LOCAL_EXECUTOR", EMBEDDED),
    "WORK_DIR": Path(env.string("QUOTAWEB_WORK_DIR", str(DATA_DIR / "work")) or DATA_DIR),
    "IN_PROCESS_SCHEDULER": env.boolean("QUOTAWEB_IN_PROCESS_SCHEDULER", EMBEDDED),
    # How this process's supervisor names itself (default: <hostname>:<slot>).
    "HOST_NAME": env.string("QUOTAWEB_HOST_NAME"),
    # Reverse proxies in front of the web server that append to X-Forwarded-For (sign-in
    # throttling counts failures per address: quotaweb/sign_in.py).
    "PROXY_COUNT": env.integer("QUOTAWEB_PROXY_COUNT", 0),
    # Live-feed websockets one user may hold open in one web process; more are refused.
    "MAX_SOCKETS_PER_USER": env.integer("QUOTAWEB_MAX_SOCKETS_PER_USER", 10, low=1),
    # The instances this executor host runs (docs/executors.md): "UNIT=NUMBERS[@DEVICES]"
    # entries, or "*" for every instance no other host declares (the embedded default).
    "INSTANCES": env.string("QUOTAWEB_INSTANCES", "*" if EMBEDDED else ""),
    # The address other hosts reach this one at (MASTER_ADDR of multi-host jobs).
    "HOST_ADDRESS": env.string("QUOTAWEB_HOST_ADDRESS"),
    # Which executor runs command jobs (quotaweb/executors/backends.py): "local" runs
    # them on the executor hosts that declare their instances.
    "COMMAND_EXECUTOR": env.string("QUOTAWEB_COMMAND_EXECUTOR", "local"),
    # Commands run in a sandbox as this unprivileged user (quotaweb/executors/sandbox.py).
    "JOB_USER": env.string("QUOTAWEB_JOB_USER", "quotaweb-job"),
    # "none": a job has only its own loopback; "host": the host's network.
    "JOB_NETWORK": env.choice("QUOTAWEB_JOB_NETWORK", ("none", "host"), "none"),
    # Resource limits of local commands (docs/executors.md, Resource limits): where the
    # cgroup file system is, and the processes a command may have per instance it holds.
    "CGROUP_ROOT": env.string("QUOTAWEB_CGROUP_ROOT", "/sys/fs/cgroup"),
    "JOB_PIDS_PER_INSTANCE": env.integer("QUOTAWEB_JOB_PIDS_PER_INSTANCE", 1024, low=8),
    # Bytes stored per attempt (row overhead counted) and lines; past either, the log
    # says so and the rest is dropped (docs/executors.md, Logs).
    "LOG_LIMIT_BYTES": env.integer("QUOTAWEB_LOG_LIMIT_BYTES", 64 * 1024 * 1024, low=1024),
    "LOG_LIMIT_LINES": env.integer("QUOTAWEB_LOG_LIMIT_LINES", 1_000_000, low=1),
    # Log lines are deleted this many days after they were printed, by a periodic task.
    "LOG_RETENTION_DAYS": env.integer("QUOTAWEB_LOG_RETENTION_DAYS", 30, low=1),
    "LOG_PRUNE_SECONDS": 3600,
    # A command attempt that no executor has started this long after it was due fails.
    "CLAIM_TIMEOUT_SECONDS": env.integer("QUOTAWEB_CLAIM_TIMEOUT_SECONDS", 300, low=1),
    # The Slurm executor (quotaweb/executors/slurm/config.py), off while SLURM_UNITS is
    # empty: which units Slurm runs and what an instance is there, which node holds which
    # instances, how a job asks for exactly its GPUs, and where output files go.
    "SLURM_UNITS": env.string("QUOTAWEB_SLURM_UNITS", ""),
    "SLURM_NODES": env.string("QUOTAWEB_SLURM_NODES", ""),
    "SLURM_GPU_TYPE": env.string("QUOTAWEB_SLURM_GPU_TYPE", ""),
    "SLURM_WORK_DIR": env.string("QUOTAWEB_SLURM_WORK_DIR"),
}
# A bad Slurm map stops the start-up with its reason (only Django's exception is imported).
build_slurm_map(str(QUOTAWEB["SLURM_UNITS"] or ""), str(QUOTAWEB["SLURM_NODES"] or ""),
                str(QUOTAWEB["SLURM_GPU_TYPE"] or ""))

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(env.string("QUOTAWEB_STATIC_ROOT", str(DATA_DIR / "staticfiles")) or DATA_DIR)
# WhiteNoise warns about a missing folder; collectstatic fills it, finders serve meanwhile.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
# Scripts from this server only, never inline; inline style attributes are allowed (the
# pages colour shares with them, and Plotly styles its charts so).  connect-src 'self'
# covers the websocket of the same host.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if HTTPS:
    SECURE_SSL_REDIRECT = env.boolean("QUOTAWEB_SSL_REDIRECT", True)
    # The containers' health check asks http://127.0.0.1:8000/healthz, behind the proxy.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.integer("QUOTAWEB_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"refusals_on_one_line": {"()": "quotaweb.logs.RefusalsOnOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["refusals_on_one_line"]}},
    "root": {"handlers": ["console"], "level": env.string("LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"},
                "django.request": {"filters": ["refusals_on_one_line"]}},
}
