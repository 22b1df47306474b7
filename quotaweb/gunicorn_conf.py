"""gunicorn's settings for Quotaweb's HTTP (pages and API; the websockets are Daphne's):

    gunicorn -c python:quotaweb.gunicorn_conf

QUOTAWEB_WEB_BIND        address to listen on [127.0.0.1:8000] (comma-separated for more)
QUOTAWEB_WEB_WORKERS     processes [2]
QUOTAWEB_WEB_THREADS     threads per process [4]: each serves one request at a time with
                         a database connection of the process's pool (DATABASE_POOL_SIZE,
                         default 10, must be at least this)
QUOTAWEB_WEB_ACCESS_LOG  1: one line per request on stdout [0: none; nginx logs them]

Django's sync views run on the threads as they are (gthread worker): no thread hop per
request as under ASGI.  Persistent database connections are the pool's, per process.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from quotaweb import env

wsgi_app = "quotaweb.wsgi:application"
bind = env.csv("QUOTAWEB_WEB_BIND", ["127.0.0.1:8000"])
worker_class = "gthread"
workers = env.integer("QUOTAWEB_WEB_WORKERS", 2, low=1)
threads = env.integer("QUOTAWEB_WEB_THREADS", 4, low=1)
# A request may wait up to env.POOL_WAIT_SECONDS (30) for a connection behind a long cycle:
# give it that and some before a worker counts as stuck.
timeout = env.POOL_WAIT_SECONDS + 30
# On SIGTERM, requests under way get this long to finish.
graceful_timeout = 20
# Kept-alive connections from nginx (its upstream keepalive) or from API clients.
keepalive = 30
accesslog = "-" if env.boolean("QUOTAWEB_WEB_ACCESS_LOG", False) else None
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
errorlog = "-"
# nginx (deploy/nginx) sets X-Forwarded-Proto; QUOTAWEB_HTTPS decides whether Django
# trusts it (settings.SECURE_PROXY_SSL_HEADER): gunicorn does not read it itself.
secure_scheme_headers: dict[str, str] = {}

_pool = env.integer("DATABASE_POOL_SIZE", 10, low=0)
if env.string("DATABASE_URL") and 0 < _pool < threads:
    raise ImproperlyConfigured(
        f"DATABASE_POOL_SIZE ({_pool}) must be at least QUOTAWEB_WEB_THREADS ({threads}): "
        "each thread holds a connection while it serves a request.")
