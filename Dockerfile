# The console's image: web (gunicorn), worker, beat, reconciler, MCP gateway and the demo
# destinations all run from it (docker-compose.yml, docs/deployment.md). Runs as an unprivileged
# user; static files are collected at build time and served by WhiteNoise.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    APP_VAR_DIR=/var/lib/console \
    STATIC_ROOT=/app/staticfiles
WORKDIR /app
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
# The packages of the demo extension (docker-compose.yml runs the demo: its destinations, its
# seed, DISPATCH_EXTENSIONS=demo.extension); `--build-arg EXTRAS=` builds an image without them.
# The client's `permits` extra: the demo destinations verify permit tokens with it.
ARG EXTRAS=demo
RUN pip install --no-cache-dir -c constraints.txt ".${EXTRAS:+[$EXTRAS]}" './clients/python[permits]' \
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
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
