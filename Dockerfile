FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY config config
COPY console console
COPY demo demo
COPY dispatch dispatch
COPY protocols protocols
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir -c constraints.txt .
ENV PYTHONUNBUFFERED=1
EXPOSE 8000 8001
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3"]
