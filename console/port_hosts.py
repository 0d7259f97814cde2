"""Subdomain mode's front door (settings.PROXY_MODE = "subdomain"): a request whose Host is a port's
(`<port>-<instance id hex>.<PROXY_BASE_DOMAIN>`) goes to the proxy and nowhere else — no console page, no API,
no static file, no session is served on a port's origin. Every other host passes through. First in MIDDLEWARE."""
from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction

from provisioning.http_ports import parse_port_host, subdomain_mode


def _port_of(request):
    return parse_port_host(request.META.get("HTTP_HOST", "")) if subdomain_mode() else None


class PortHostMiddleware:
    async_capable = True
    sync_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        found = _port_of(request)
        if found:
            from .views.proxy import port_host

            return async_to_sync(port_host)(request, *found)
        return self.get_response(request)

    async def _acall(self, request):
        found = _port_of(request)
        if found:
            from .views.proxy import port_host

            return await port_host(request, *found)
        return await self.get_response(request)
