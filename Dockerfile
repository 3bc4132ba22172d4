# The console's image: web (gunicorn), worker, beat, reconciler, MCP gateway and the demo
# destinations all run from it (docker-compose.yml, docs/deployment.md). Runs as an unprivileged
# user; static files are collected at build time and served by WhiteNoise.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    APP_VAR_DIR=/var/lib/console \
    STATIC_ROOT=/app/staticfiles \
    WEB_CONCURRENCY=3
WORKDIR /app
# Every third-party package from the hash-locked list (scripts/lock_image.sh): pip refuses a file
# whose hash is not in it, and a package not in it. A layer of its own, rebuilt only when the
# list changes.
COPY requirements/image.txt requirements/image.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements/image.txt
COPY pyproject.toml constraints.txt README.md ./
COPY config config
COPY console console
COPY demo demo
COPY dispatch dispatch
COPY protocols protocols
# The Python client: the demo destinations verify permit tokens with exact_console.permits.
COPY clients/python clients/python
COPY templates templates
COPY static static
COPY manage.py gunicorn.conf.py ./
COPY deploy/probe.py deploy/probe.py
# The project and the Python client themselves, with nothing from the index: their dependencies
# (with the demo extension's and the client's `permits` extra: docker-compose.yml runs the demo)
# are the locked ones above, and `pip check` fails the build if one is missing.
RUN pip install --no-cache-dir --no-deps --no-index --no-build-isolation . ./clients/python \
 && pip check \
 && SECRET_KEY=collectstatic-at-build-only APP_VAR_DIR=/tmp/build-var \
    python manage.py collectstatic --noinput \
 && rm -rf /tmp/build-var \
 && groupadd --system --gid 10001 console \
 && useradd --system --uid 10001 --gid console --home-dir /var/lib/console --create-home \
    --shell /usr/sbin/nologin console \
 && mkdir -p /var/lib/console/destinations \
 && chown -R console:console /var/lib/console
# Nothing in /app is writable by the app; its own files (the beat schedule, the demo's files)
# live in APP_VAR_DIR, which it owns.
USER console:console
EXPOSE 8000 8001
# The default command's check (the web's readiness); docker-compose.yml sets each other
# service's own (deploy/probe.py: the standard library only, no application loaded).
HEALTHCHECK --interval=15s --timeout=10s --start-period=20s --retries=3 \
  CMD ["python", "/app/deploy/probe.py", "http", "http://127.0.0.1:8000/readyz"]
# gunicorn's worker processes: WEB_CONCURRENCY (above; about 2 per core).
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000"]
