"""Security headers Django does not set itself: a Content-Security-Policy on console pages.

The console loads only its own assets (no CDN, no inline script or style: htmx and the page scripts
are static files). The one exception is the top-up page, which loads Stripe.js from
settings.STRIPE_JS_URL (card data must never touch our server) and talks to Stripe from the browser.
"""
import secrets
from urllib.parse import urlsplit

from django.conf import settings

# URL names of the pages that may load Stripe.js.
STRIPE_PAGES = frozenset({"console:billing_topup"})
# The page with the web terminal: xterm.js writes its theme and cell sizes into <style> elements it creates
# (static/vendor/xterm/README.md). There style-src also allows a per-response nonce, which static/js/terminal.js
# gives the <style> elements it sees created; nothing inline in the markup passes, and scripts stay 'self'.
TERMINAL_PAGES = frozenset({"console:instance_detail"})
# django-allauth's SSO pages: their sign-in form posts and is redirected to the identity provider.
SSO_PAGES = ("/accounts/oidc/", "/accounts/3rdparty/")
# Paths that are not console pages: the API (JSON; its Swagger page ships its own inline bootstrap),
# Django's admin, the static files, and an instance's own pages through the port proxy (they bring their own).
NOT_CONSOLE = ("/api/", "/admin/", "/static/", "/proxy/")


def _origin(url: str) -> str:
    parts = urlsplit(url or "")
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def stripe_sources() -> dict[str, list[str]]:
    """Extra sources the top-up page needs, derived from the configured Stripe.js and API URLs."""
    js = _origin(settings.STRIPE_JS_URL)
    extra = {"script-src": [js], "connect-src": [js], "frame-src": [js]}
    if urlsplit(settings.STRIPE_JS_URL).hostname == "js.stripe.com":  # Stripe's documented CSP needs
        extra["connect-src"].append("https://api.stripe.com")
        extra["frame-src"].append("https://hooks.stripe.com")
    api = _origin(getattr(settings, "STRIPE_API_BASE", ""))
    if api:
        extra["connect-src"].append(api)
    return {k: [v for v in dict.fromkeys(vs) if v] for k, vs in extra.items()}


def sso_form_origins() -> list[str]:
    """Origins an SSO sign-in form may post to and be redirected to (form-action covers the redirect): the
    configured OpenID Connect providers' and settings.SSO_FORM_ACTION_ORIGINS (for providers added in the admin)."""
    apps = getattr(settings, "SOCIALACCOUNT_PROVIDERS", {}).get("openid_connect", {}).get("APPS", [])
    origins = [_origin(app.get("settings", {}).get("server_url", "")) for app in apps]
    origins += [_origin(o) for o in getattr(settings, "SSO_FORM_ACTION_ORIGINS", [])]
    return [o for o in dict.fromkeys(origins) if o]


def content_security_policy(*, stripe: bool = False, style_nonce: str = "", sso: bool = False) -> str:
    """The console's policy; `stripe=True` adds the Stripe.js origins (top-up page only), `style_nonce` the
    <style> elements carrying it (the instance page's xterm.js)."""
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "frame-src": ["'none'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
    if sso:
        directives["form-action"] += sso_form_origins()
    if style_nonce:
        directives["style-src"] = ["'self'", f"'nonce-{style_nonce}'"]
    if stripe:
        for name, sources in stripe_sources().items():
            directives[name] = [s for s in directives[name] if s != "'none'"] + sources
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in directives.items())


class ContentSecurityPolicyMiddleware:
    """Adds Content-Security-Policy (and Permissions-Policy) to console responses."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.csp_style_nonce = secrets.token_urlsafe(18)  # used only where TERMINAL_PAGES' templates ask
        response = self.get_response(request)
        if request.path.startswith(NOT_CONSOLE) or "Content-Security-Policy" in response:
            return response
        match = getattr(request, "resolver_match", None)
        stripe = bool(match and match.view_name in STRIPE_PAGES)
        nonce = request.csp_style_nonce if match and match.view_name in TERMINAL_PAGES else ""
        sso = request.path.startswith(SSO_PAGES)
        response["Content-Security-Policy"] = content_security_policy(stripe=stripe, style_nonce=nonce, sso=sso)
        response.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
        response.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response


def axes_username(request, credentials) -> str | None:
    """django-axes AXES_USERNAME_CALLABLE: the login name as the lockout key, case-folded (emails log in
    case-insensitively, so `A@x` and `a@x` must share one failure counter)."""
    name = (credentials or {}).get("username")
    if name is None and request is not None:
        name = getattr(request, "POST", {}).get("username")
    return name.strip().lower() if isinstance(name, str) else name
