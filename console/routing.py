"""WebSocket routes (config/asgi.py): the port proxy's upgrades and the web terminal."""
from django.urls import re_path

from .consumers.proxy import PortProxyConsumer
from .consumers.terminal import TerminalConsumer

websocket_urlpatterns = [
    re_path(r"^proxy/(?P<instance_id>[^/]+)/(?P<port>[0-9]{1,5})/", PortProxyConsumer.as_asgi()),
    re_path(r"^ws/instances/(?P<instance_id>[^/]+)/terminal/$", TerminalConsumer.as_asgi()),
]
