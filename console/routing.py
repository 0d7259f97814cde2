"""WebSocket routes (config/asgi.py): the port proxy's upgrades and the web terminal; in subdomain mode, every
WebSocket to a port's own host goes to the proxy, without the platform's session."""
from django.urls import re_path

from provisioning.http_ports import parse_port_host, subdomain_mode

from .consumers.proxy import PORT_HOST_SCOPE_KEY, PortProxyConsumer
from .consumers.terminal import TerminalConsumer

websocket_urlpatterns = [
    re_path(r"^proxy/(?P<instance_id>[^/]+)/(?P<port>[0-9]{1,5})/", PortProxyConsumer.as_asgi()),
    re_path(r"^ws/instances/(?P<instance_id>[^/]+)/terminal/$", TerminalConsumer.as_asgi()),
]


class PortHostRouter:
    """A WebSocket to `<port>-<instance>.<base domain>` goes to the port proxy (whatever its path); any other
    host to `console` (the session-authenticated routes above)."""

    def __init__(self, console):
        self.console = console
        self.port = PortProxyConsumer.as_asgi()

    async def __call__(self, scope, receive, send):
        host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
        found = parse_port_host(host) if subdomain_mode() else None
        if found is None:
            return await self.console(scope, receive, send)
        route = {"args": (), "kwargs": {"instance_id": found[0], "port": str(found[1])}}
        return await self.port({**scope, "url_route": route, PORT_HOST_SCOPE_KEY: True}, receive, send)
