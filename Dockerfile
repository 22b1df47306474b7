# Quotaweb's image for the distributed mode (docker-compose.yml): one image, several roles
# (web: gunicorn, websockets: Daphne, executor worker, tick worker, beat), chosen by the
# command.  nginx runs from its own image in front (deploy/nginx).
FROM python:3.11-slim

# PYTHONPATH: templates/ and static/ sit beside the package in the source tree, not in the
# wheel, so the source copy in /app is the one imported.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=quotaweb.settings \
    QUOTAWEB_DATA_DIR=/app/data \
    PYTHONPATH=/app

# bubblewrap: the sandbox of command jobs; quotaweb-job: the user they run as
# (docs/executors.md).  Only the worker service runs them, as root in its container.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system quotaweb \
    && useradd --system --gid quotaweb --home-dir /app --shell /usr/sbin/nologin quotaweb \
    && useradd --system --no-create-home --shell /usr/sbin/nologin quotaweb-job

WORKDIR /app

# Dependencies first, so that editing the code does not reinstall them.
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
COPY quotaweb ./quotaweb
RUN pip install --no-cache-dir .

COPY . .
# A throwaway key for collectstatic only: without one the embedded settings would write a
# generated key into the image.  The containers get theirs from SECRET_KEY.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
    && mkdir -p /app/data/work \
    && chown -R quotaweb:quotaweb /app/data

USER quotaweb
EXPOSE 8000

CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000"]
