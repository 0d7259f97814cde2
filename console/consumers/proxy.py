"""The WebSocket half of `/proxy/<instance>/<port>/…` (JupyterLab's kernels and terminals need it).

Same check as HTTP (proxy_access.port_target), then a `websockets` connection to the upstream with the
same path, the browser's subprotocols and the JupyterLab token; frames are passed both ways unchanged. A
caller who may not reach the port is refused before the upgrade.
"""
import asyncio
import contextlib

import websockets
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from core.errors import NotFoundError

from .. import proxy_access as access
from ..views.proxy import upstream_headers


def _headers(scope) -> dict:
    return {k.decode("latin-1").title(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class PortProxyConsumer(AsyncWebsocketConsumer):
    upstream = None
    pump = None

    async def connect(self):
        kwargs = self.scope["url_route"]["kwargs"]
        headers = _headers(self.scope)
        cookie = headers.get("Cookie", "")
        try:
            target = await database_sync_to_async(access.port_target)(
                user=self.scope.get("user"), session=self.scope.get("session") or {},
                instance_id=kwargs["instance_id"], port=int(kwargs["port"]),
                share_secret=access.share_cookie_value(cookie))
        except NotFoundError:
            await self.close()
            return
        host = f"{target.host}:{target.upstream_port}"
        query = self.scope.get("query_string", b"").decode("latin-1")
        url = f"ws://{host}{self.scope['path']}" + (f"?{query}" if query else "")
        sent = upstream_headers({k: v for k, v in headers.items() if not k.startswith("Sec-Websocket")},
                                cookie=cookie, token=target.jupyter_token, host=host,
                                origin_host=headers.get("Host", ""))
        origin = sent.pop("Origin", f"http://{host}")
        sent.pop("Host", None)  # websockets sets it from the URL
        try:
            self.upstream = await websockets.connect(
                url, additional_headers=sent, origin=origin, subprotocols=self.scope.get("subprotocols") or None,
                open_timeout=settings.PROXY_UPSTREAM_TIMEOUT_SECONDS, max_size=None, compression=None)
        except (TimeoutError, OSError, websockets.WebSocketException):
            await self.close()
            return
        await self.accept(subprotocol=self.upstream.subprotocol)
        self.pump = asyncio.create_task(self._from_upstream())

    async def _from_upstream(self):
        try:
            async for message in self.upstream:
                if isinstance(message, bytes):
                    await self.send(bytes_data=message)
                else:
                    await self.send(text_data=message)
        except websockets.ConnectionClosed:
            pass
        finally:
            await self.close()

    async def receive(self, text_data=None, bytes_data=None):
        if self.upstream is None:
            return
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.upstream.send(bytes_data if bytes_data is not None else text_data)

    async def disconnect(self, code):
        if self.upstream is not None:
            await self.upstream.close()
        if self.pump is not None and self.pump is not asyncio.current_task():
            self.pump.cancel()
