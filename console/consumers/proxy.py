"""The WebSocket half of `/proxy/<instance>/<port>/…` and of a port's own host in subdomain mode (JupyterLab's
kernels and terminals need it).

Same check as HTTP (proxy_access.port_target), then a `websockets` connection to the upstream with the
same path, the browser's subprotocols and the JupyterLab token; frames are passed both ways unchanged. A
caller who may not reach the port is refused before the upgrade.
"""
import asyncio
import contextlib

import asyncssh
import websockets
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils.encoding import escape_uri_path

from core.errors import NotFoundError
from provisioning.host_keys import HostKeyMismatch
from provisioning.http_ports import subdomain_mode, upstream_path

from .. import port_grants
from .. import proxy_access as access
from ..views.proxy import upstream_address, upstream_headers

# Set by PortHostRouter (console/routing.py) on a WebSocket to a port's own host (subdomain mode).
PORT_HOST_SCOPE_KEY = "cardmix_port_host"


def _headers(scope) -> dict:
    return {k.decode("latin-1").title(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class PortProxyConsumer(AsyncWebsocketConsumer):
    upstream = None
    pump = None

    async def connect(self):
        kwargs = self.scope["url_route"]["kwargs"]
        instance_id, port = kwargs["instance_id"], int(kwargs["port"])
        headers = _headers(self.scope)
        cookie = headers.get("Cookie", "")
        on_port_host = self.scope.get(PORT_HOST_SCOPE_KEY, False)
        if subdomain_mode() and not on_port_host:  # the platform's origin serves no port in subdomain mode
            await self.close()
            return
        try:
            if on_port_host:
                target = await database_sync_to_async(port_grants.host_target)(
                    cookie=cookie, share_secret="", instance_id=instance_id, port=port)
            else:
                target = await database_sync_to_async(access.port_target)(
                    user=self.scope.get("user"), session=self.scope.get("session") or {},
                    instance_id=instance_id, port=port, share_secret=access.share_cookie_value(cookie))
        except NotFoundError:
            await self.close()
            return
        try:
            host = "%s:%s" % await upstream_address(target)
        except (OSError, asyncssh.Error, HostKeyMismatch):
            await self.close()
            return
        query = self.scope.get("query_string", b"").decode("latin-1")
        path = upstream_path(instance_id, port, self.scope["path"])
        url = f"ws://{host}{escape_uri_path(path)}" + (f"?{query}" if query else "")
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
