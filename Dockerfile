# Production image: the uvicorn (ASGI) web, Celery worker and beat share it (docker-compose.yml).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 CARDMIX_ENV=production
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config ./config
COPY core ./core
COPY tenancy ./tenancy
COPY inventory ./inventory
COPY billing ./billing
COPY provisioning ./provisioning
COPY console ./console
RUN pip install --no-cache-dir .
COPY . .
# (Build-time values only: neither command opens the database, but production settings require both.)
RUN export SECRET_KEY=build-only-not-secret DATABASE_URL=postgres://build-only@localhost/none \
 && python manage.py collectstatic --noinput \
 && python manage.py compile_translations --force
# (compile_translations: the Chinese catalog's .mo from locale/*.po, in Python; the .mo files are not committed)
# var/ssh-gateway: the gateway's host-key volume starts out owned by cardmix (docker-compose.yml).
RUN useradd --system --home /app cardmix && mkdir -p /app/var/ssh-gateway && chown -R cardmix /app
USER cardmix
EXPOSE 8000 2222
CMD ["uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "4", "--lifespan", "off", "--proxy-headers"]
