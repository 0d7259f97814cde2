"""Walk the project's URLconf: every pattern with its full name, route, URL kwargs and HTTP methods."""
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver

FALLBACK_METHODS = ("get", "post")  # plain Django function views: try both


@dataclass(frozen=True)
class Route:
    """One URL pattern: `api:instance-detail`, its route text, its kwargs and the methods it answers."""

    name: str
    route: str
    kwargs: tuple[str, ...]
    methods: tuple[str, ...]
    is_drf: bool


def _kwargs(pattern) -> tuple[str, ...]:
    return tuple(pattern.pattern.regex.groupindex)


def _methods(callback) -> tuple[str, bool]:
    actions = getattr(callback, "actions", None)  # a DRF viewset route
    if actions:
        return tuple(m for m in actions if m not in ("head", "options")), True
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if cls is not None:
        names = [m for m in cls.http_method_names if m not in ("head", "options", "trace") and hasattr(cls, m)]
        is_drf = hasattr(cls, "permission_classes")
        return tuple(names), is_drf
    return FALLBACK_METHODS, False


def walk(resolver=None, prefix: str = "", namespace: str = "", outer: tuple[str, ...] = ()) -> list[Route]:
    """Every URLPattern reachable from the root URLconf, recursively through include(); a pattern's kwargs include
    those its include()s capture (`keys/<int:pk>/` + `remove/`)."""
    resolver = resolver or get_resolver()
    found: list[Route] = []
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            ns = namespace
            if p.namespace:
                ns = f"{namespace}:{p.namespace}" if namespace else p.namespace
            found += walk(p, prefix + str(p.pattern), ns, outer + _kwargs(p))
        elif isinstance(p, URLPattern):
            name = f"{namespace}:{p.name}" if namespace else (p.name or "")
            methods, is_drf = _methods(p.callback)
            found.append(Route(name, prefix + str(p.pattern), outer + _kwargs(p), methods, is_drf))
    return found
