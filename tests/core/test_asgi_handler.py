"""The ASGI web runs a request's middleware and view in one thread crossing (core/asgi_handler.py). Django's own
ASGIHandler, the control, crosses between the event loop and the request thread four times or more for the same
sync-only middleware and view: each crossing is a future, a wake-up and a context copy, about a third of a trivial
request's CPU behind uvicorn."""
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import AsyncToSync, SyncToAsync
from django.core.handlers.asgi import ASGIHandler

from core.asgi_handler import OneHopASGIHandler
from tests.factories.tenancy import make_token

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _get(handler, path: str, secret: str) -> tuple[dict, bytes]:
    """One GET through `handler` as uvicorn calls it: (its response start message, its body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {secret}".encode())],
             "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}
    sent = []

    async def run():
        done = asyncio.Event()
        first = True

        async def receive():
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await handler(scope, receive, send)

    asyncio.run(run())
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:])


def _crossings(monkeypatch, handler, path, secret) -> tuple[int, int, dict, bytes]:
    """(sync_to_async calls, async_to_sync calls, response start, body) of one request through `handler`."""
    counts = {"to_thread": 0, "to_loop": 0}
    to_thread, to_loop = SyncToAsync.__call__, AsyncToSync.__call__

    async def counted_to_thread(self, *args, **kwargs):
        counts["to_thread"] += 1
        return await to_thread(self, *args, **kwargs)

    def counted_to_loop(self, *args, **kwargs):
        counts["to_loop"] += 1
        return to_loop(self, *args, **kwargs)

    _get(handler, path, secret)  # warm: the first request loads what later ones find ready
    monkeypatch.setattr(SyncToAsync, "__call__", counted_to_thread)
    monkeypatch.setattr(AsyncToSync, "__call__", counted_to_loop)
    try:
        start, body = _get(handler, path, secret)
    finally:
        monkeypatch.setattr(SyncToAsync, "__call__", to_thread)
        monkeypatch.setattr(AsyncToSync, "__call__", to_loop)
    return counts["to_thread"], counts["to_loop"], start, body


@pytest.mark.parametrize("path", ["/api/v1/ping/", "/api/v1/instances/"])
def test_a_request_crosses_into_its_thread_once_for_middleware_and_view(member_factory, monkeypatch, path):
    _, secret = make_token(member_factory(role="owner"))
    ours = _crossings(monkeypatch, OneHopASGIHandler(), path, secret)
    stock = _crossings(monkeypatch, ASGIHandler(), path, secret)
    assert ours[2]["status"] == stock[2]["status"] == 200
    assert ours[3] == stock[3]  # the same answer
    # Ours: the request_started signal, the middleware chain with the view, and closing the response.
    assert ours[:2] == (3, 0), ours[:2]
    # Django's: those, plus back to the loop for its async core, out again for process_view hooks and the view.
    assert stock[0] >= ours[0] + 2 and stock[1] >= 1, stock[:2]


def test_config_asgi_serves_http_with_it():
    # In a fresh interpreter: importing config.asgi also tunes the process's collector (core/gc_tuning.py).
    probe = ("import config.asgi, core.asgi_handler as h; "
             "print(type(config.asgi.django_application) is h.OneHopASGIHandler)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"})
    assert out.stdout.strip().splitlines()[-1:] == ["True"], out.stderr[-2000:]
