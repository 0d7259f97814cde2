"""ASGI entry point (uvicorn): HTTP to Django, WebSockets to the console's consumers (Django Channels).

WebSockets carry the session cookie, so their routes sit behind the session and auth middleware and two Origin
checks: the page's origin is the host it connects to, and in ALLOWED_HOSTS (a page on another site must not open
a terminal with a visitor's cookie).
"""
import os

from core.asgi_handler import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Under ASGI every request runs its sync code in a thread of its own: persistent per-thread connections would leak
# one PostgreSQL connection per request thread until the server refuses clients. The web takes a pool instead.
os.environ.setdefault("DB_POOL", "true")
django_application = get_asgi_application()  # first: it loads the apps the routes import

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.routing import PortHostRouter, websocket_urlpatterns  # noqa: E402
from console.ws_origin import SameOriginValidator  # noqa: E402
from core.gc_tuning import tune_for_requests  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_application,
    "websocket": SameOriginValidator(AllowedHostsOriginValidator(PortHostRouter(AuthMiddlewareStack(
        URLRouter(websocket_urlpatterns))))),
})
tune_for_requests()  # last: what start-up built is frozen
