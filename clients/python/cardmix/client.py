"""The HTTP client: bearer token, the error envelope as exceptions, Idempotency-Key on creates, and retries
on 429/503 that honour Retry-After (and on connection errors when the request is safe to repeat)."""
from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from .errors import ServiceUnavailable, error_from
from .resources import Billing, Catalog, Instances, Quotes, SshKeys

DEFAULT_URL = "http://127.0.0.1:8000"
RETRY_STATUSES = {429, 503}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("cardmix")
    except Exception:  # running from a checkout without installing
        return "0"


class Client:
    """`Client(token="cmx_…", base_url="https://cardmix.example.com")`; both default to the environment
    (CARDMIX_TOKEN, CARDMIX_URL)."""

    def __init__(self, token: str | None = None, base_url: str | None = None, *, timeout: float = 30.0,
                 max_retries: int = 4, max_retry_wait: float = 60.0, sleep=time.sleep):
        self.token = token or os.environ.get("CARDMIX_TOKEN") or ""
        self.base_url = (base_url or os.environ.get("CARDMIX_URL") or DEFAULT_URL).rstrip("/")
        self.max_retries, self.max_retry_wait, self._sleep = max_retries, max_retry_wait, sleep
        headers = {"User-Agent": f"cardmix-python/{_version()}", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._http = httpx.Client(base_url=f"{self.base_url}/api/v1/", headers=headers, timeout=timeout)
        self.instances = Instances(self)
        self.catalog = Catalog(self)
        self.quotes = Quotes(self)
        self.billing = Billing(self)
        self.ssh_keys = SshKeys(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
                idempotency_key: str | None = None, create: bool = False) -> Any:
        """One API call → the decoded JSON (None for 204). `create=True` adds an Idempotency-Key (one per call,
        kept across its retries), which also makes a retry after a lost connection safe."""
        method = method.upper()
        if create and idempotency_key is None:
            idempotency_key = str(uuid.uuid4())
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        repeatable = method in ("GET", "HEAD", "DELETE") or idempotency_key is not None
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self._http.request(method, path.lstrip("/"), json=json, params=params, headers=headers)
            except httpx.TransportError as exc:
                if repeatable and not last:
                    self._sleep(min(2 ** attempt, self.max_retry_wait))
                    continue
                raise ServiceUnavailable(f"Cannot reach {self.base_url}: {exc}") from exc
            if response.status_code in RETRY_STATUSES and not last:
                self._sleep(self._wait_of(response, attempt))
                continue
            return self._decoded(response)
        raise AssertionError("unreachable")

    def _wait_of(self, response: httpx.Response, attempt: int) -> float:
        retry_after = response.headers.get("Retry-After")
        try:
            wait = float(retry_after) if retry_after is not None else 2 ** attempt
        except ValueError:
            wait = 2 ** attempt
        return max(0.0, min(wait, self.max_retry_wait))

    @staticmethod
    def _decoded(response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        if response.status_code >= 400:
            retry_after = response.headers.get("Retry-After")
            raise error_from(response.status_code, body,
                             retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None)
        return body

    def paginate(self, path: str, params: dict | None = None, *, page_size: int = 100,
                 cursor: bool = True) -> Iterator[dict]:
        """Every row of a list endpoint, following `next` page by page.

        `cursor` (default): pages by the API's opaque cursor (`?cursor=`), so each page costs the server the
        same however deep the list, and rows added while iterating are neither repeated nor skipped. A server
        that predates cursors ignores the parameter and pages by offset; its `next` links are followed alike.
        `cursor=False` pages by limit/offset."""
        params = {"limit": page_size, **({"cursor": ""} if cursor else {}), **(params or {})}
        body = self.request("GET", path, params=params)
        while True:
            yield from body.get("results", [])
            nxt = body.get("next")
            if not nxt:
                return
            # `next` is absolute; keep only what follows /api/v1/ so the client's base URL and auth apply.
            body = self.request("GET", nxt.split("/api/v1/", 1)[-1])
