"""Under ASGI Django makes a cache object per request, and its Redis cache made a connection pool per object: every
API request behind uvicorn opened a new TCP connection to Redis for its token throttle. core.cache keeps one pool per
process and server, so a run of requests through the ASGI handler reuses one connection."""
import asyncio

import pytest
from django.core.cache import caches
from django.test import AsyncClient, override_settings
from redis.connection import AbstractConnection

from tests.factories.tenancy import make_token

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

REQUESTS = 30


def _connects_for_pings(monkeypatch, secret) -> int:
    """Redis connections opened while REQUESTS token-authenticated pings run through Django's ASGI handler."""
    made = []
    real_connect = AbstractConnection.connect

    def connect(self, *args, **kwargs):  # counts a new socket, then connects for real (a no-op when connected)
        if self._sock is None:
            made.append(self)
        return real_connect(self, *args, **kwargs)

    monkeypatch.setattr(AbstractConnection, "connect", connect)

    async def pings():
        client, auth = AsyncClient(), {"Authorization": f"Bearer {secret}"}
        # One task per request, as uvicorn serves them: each starts from a copy of the server's context.
        answers = [await asyncio.create_task(client.get("/api/v1/ping/", headers=auth)) for _ in range(REQUESTS)]
        return [a.status_code if a.status_code == 200 else a.content for a in answers]

    assert asyncio.run(pings()) == [200] * REQUESTS
    monkeypatch.setattr(AbstractConnection, "connect", real_connect)
    return len(made)


def test_requests_through_the_asgi_handler_share_one_redis_connection(member_factory, monkeypatch):
    assert type(caches["default"]).__module__ == "core.cache"
    _, secret = make_token(member_factory(role="owner"))
    assert _connects_for_pings(monkeypatch, secret) <= 1


def test_djangos_own_redis_cache_opens_one_per_request(member_factory, monkeypatch, settings):
    """The control: the same requests on Django's RedisCache, which core.cache replaces, connect every time."""
    _, secret = make_token(member_factory(role="owner"))
    plain = {**settings.CACHES["default"], "BACKEND": "django.core.cache.backends.redis.RedisCache"}
    with override_settings(CACHES={"default": plain}):
        assert _connects_for_pings(monkeypatch, secret) >= REQUESTS
