"""WebSockets carry the session cookie even when another site opens them: only a page of the platform itself,
whose Origin is the Host it connects to, may open one (besides the ALLOWED_HOSTS check, which "*" turns off)."""
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier


class SameOriginValidator:
    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        origin = urlsplit(headers.get(b"origin", b"").decode("latin-1")).netloc.lower()
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if not host or origin != host:
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
