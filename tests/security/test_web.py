"""Web hardening: production settings and headers, CSRF on every console form, CSP, passwords, lockout, throttles."""
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from . import registry
from .urlwalk import walk

ROOT = Path(__file__).resolve().parents[2]
PROD_ENV = {
    "CARDMIX_ENV": "production", "SECRET_KEY": "p" * 20 + "-Production-Secret-For-Security-Tests-0123456789",
    "ALLOWED_HOSTS": "cardmix.example", "CSRF_TRUSTED_ORIGINS": "https://cardmix.example",
}

# --- production settings, from a real process with CARDMIX_ENV=production -----------------------

PROBE = r"""
import json, django
django.setup()
from django.conf import settings
from django.test import Client
c = Client()
plain = c.get("/login/", HTTP_HOST="cardmix.example")
secure = c.get("/login/", HTTP_HOST="cardmix.example", secure=True)
proxied = Client().get("/login/", HTTP_HOST="cardmix.example", HTTP_X_FORWARDED_PROTO="https")
cookies = {k: {"secure": bool(v["secure"]), "httponly": bool(v["httponly"]), "samesite": v["samesite"]}
           for k, v in secure.cookies.items()}
print(json.dumps({
    "debug": settings.DEBUG, "hsts": settings.SECURE_HSTS_SECONDS, "ssl_redirect": settings.SECURE_SSL_REDIRECT,
    "proxy_header": list(settings.SECURE_PROXY_SSL_HEADER or []),
    "session_secure": settings.SESSION_COOKIE_SECURE, "csrf_secure": settings.CSRF_COOKIE_SECURE,
    "session_httponly": settings.SESSION_COOKIE_HTTPONLY,
    "plain_status": plain.status_code, "plain_location": plain.get("Location", ""),
    "secure_status": secure.status_code, "proxied_status": proxied.status_code,
    "headers": dict(secure.headers), "cookies": cookies,
    "validators": [v["NAME"].rsplit(".", 1)[1] for v in settings.AUTH_PASSWORD_VALIDATORS],
    "axes": [settings.AXES_ENABLED, settings.AXES_FAILURE_LIMIT],
}))
"""


def _production(code: str, **extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(PROD_ENV, **extra)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_production_settings_and_headers():
    result = _production(PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    p = json.loads(result.stdout.strip().splitlines()[-1])
    assert p["debug"] is False
    assert p["hsts"] >= 31_536_000 and p["ssl_redirect"] is True
    assert p["proxy_header"] == ["HTTP_X_FORWARDED_PROTO", "https"]  # TLS terminates at the proxy
    assert p["session_secure"] and p["csrf_secure"] and p["session_httponly"]
    assert p["plain_status"] == 301 and p["plain_location"].startswith("https://cardmix.example/")
    assert p["secure_status"] == 200 and p["proxied_status"] == 200
    h = {k.lower(): v for k, v in p["headers"].items()}
    assert "max-age=31536000" in h["strict-transport-security"]
    assert "includeSubDomains" in h["strict-transport-security"]
    assert h["x-frame-options"] == "DENY"
    assert h["referrer-policy"] == "same-origin"
    assert h["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in h["content-security-policy"]
    assert p["cookies"]["csrftoken"]["secure"] is True and p["cookies"]["csrftoken"]["httponly"] is True
    assert {"MinimumLengthValidator", "CommonPasswordValidator", "NumericPasswordValidator",
            "UserAttributeSimilarityValidator"} <= set(p["validators"])
    assert p["axes"] == [True, 5]


def test_production_refuses_to_start_without_secret_key():
    result = _production("import django; django.setup()", SECRET_KEY="")
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr


# --- CSP ------------------------------------------------------------------------------------------

def _csp(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in header.split("; ")}


@pytest.mark.django_db
def test_console_pages_have_a_strict_csp(world, console_client_for, settings):
    from core.security import _origin

    settings.STRIPE_API_KEY = "sk_test_security"  # an account's key: the top-up page loads Stripe.js (not on dev keys)
    client = console_client_for(world.a)
    stripe_origin = _origin(settings.STRIPE_JS_URL)
    pages = [r.name for r in walk() if r.name.startswith("console:") and not r.kwargs and "get" in r.methods]
    checked = 0
    for name in pages:
        response = client.get(reverse(name))
        if response.status_code != 200 or not response["Content-Type"].startswith("text/html"):
            continue
        checked += 1
        csp = _csp(response)
        assert csp["default-src"] == ["'self'"] and csp["frame-ancestors"] == ["'none'"], name
        assert csp["object-src"] == ["'none'"] and csp["base-uri"] == ["'self'"], name
        assert csp["style-src"] == ["'self'"], name
        joined = response["Content-Security-Policy"]
        assert "'unsafe-inline'" not in joined and "'unsafe-eval'" not in joined, name
        assert response["X-Frame-Options"] == "DENY" and response["Referrer-Policy"] == "same-origin"
        if name == "console:billing_topup":
            assert stripe_origin in csp["script-src"] and stripe_origin in csp["frame-src"]
            assert f'<script src="{settings.STRIPE_JS_URL}"' in response.content.decode()
        else:
            assert stripe_origin not in joined, f"{name} allows Stripe.js"
    assert checked >= 15
    assert "Content-Security-Policy" not in client.get("/api/v1/organizations/current/")


class _Inline(HTMLParser):
    def __init__(self):
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = {k.lower() for k, _ in attrs}
        if tag == "script" and "src" not in names and dict(attrs).get("type") not in ("application/json",):
            self.problems.append("inline <script>")
        if tag == "style":
            self.problems.append("<style> element")
        if "style" in names:
            self.problems.append(f"style= on <{tag}>")
        self.problems += [f"{n}= on <{tag}>" for n in names if n.startswith("on") or n.startswith("hx-on")]
        self.problems += [f"javascript: URL on <{tag}>" for k, v in attrs if v and v.strip().lower().startswith(
            "javascript:")]


def test_templates_need_no_unsafe_inline():
    """The CSP has no 'unsafe-inline': templates carry no inline script, style or event handler."""
    found = {}
    templates = [p for d in ("templates", "console/templates", "billing/templates", "provisioning/templates",
                             "tenancy/templates", "inventory/templates", "hardware/templates")
                 for p in (ROOT / d).rglob("*.html")]
    assert templates
    for path in templates:
        if "/admin/" in str(path):
            continue  # Django admin templates are not console pages
        parser = _Inline()
        parser.feed(re.sub(r"{%.*?%}|{{.*?}}", "x", path.read_text()))
        if parser.problems:
            found[str(path.relative_to(ROOT))] = sorted(set(parser.problems))
    assert not found, found


# --- CSRF on every console form ---------------------------------------------------------------------

class _Forms(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms: list[tuple[str, bool]] = []  # (action, has csrf token)
        self.htmx_posts: list[str] = []
        self._in: str | None = None
        self._token = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and (a.get("method") or "get").lower() == "post":
            self._in, self._token = a.get("action") or "", False
        if tag == "input" and a.get("name") == "csrfmiddlewaretoken" and self._in is not None:
            self._token = True
        for attr in ("hx-post", "hx-put", "hx-patch", "hx-delete"):
            if a.get(attr):
                self.htmx_posts.append(a[attr])

    def handle_endtag(self, tag):
        if tag == "form" and self._in is not None:
            self.forms.append((self._in, self._token))
            self._in = None


def _console_pages(world):
    """(URL) of every console page that answers GET: lists and A's own objects' pages."""
    urls = []
    for r in walk():
        if not r.name.startswith("console:") or r.name in ("console:logout",) or "get" not in r.methods:
            continue
        if not r.kwargs:
            urls.append(reverse(r.name))
        elif r.name in registry.OBJECT_FACTORIES:
            urls.append(reverse(r.name, kwargs=registry.OBJECT_FACTORIES[r.name](world).kwargs))
    return urls


@pytest.mark.django_db
def test_every_console_form_needs_the_csrf_token(world, settings):
    from tenancy.middleware import SESSION_ORG_KEY
    from tests.factories.tenancy import PASSWORD

    settings.AXES_ENABLED = False
    logged_in = Client(enforce_csrf_checks=True)
    logged_in.force_login(world.a.user)
    session = logged_in.session
    session[SESSION_ORG_KEY] = str(world.a.organization_id)
    session.save()
    anonymous = Client(enforce_csrf_checks=True)
    targets: dict[str, Client] = {}
    pages = _console_pages(world)
    for client in (anonymous, logged_in):
        for url in pages:
            response = client.get(url)
            if response.status_code != 200 or not response["Content-Type"].startswith("text/html"):
                continue
            parser = _Forms()
            parser.feed(response.content.decode())
            for action, has_token in parser.forms:
                assert has_token, f"POST form on {url} (action {action!r}) has no csrfmiddlewaretoken"
                targets.setdefault(action or url, client)
            for action in parser.htmx_posts:
                targets.setdefault(action, client)  # htmx sends X-CSRFToken from <body hx-headers>
    assert len(targets) >= 10, targets
    for action, client in targets.items():
        if not action.startswith("/"):
            continue
        body = {"email": world.a.user.email, "username": world.a.user.email, "password": PASSWORD,
                "name": "x", "amount": "100.00", "role": "viewer", "action": "stop"}
        response = client.post(action, body)
        assert response.status_code == 403, f"POST {action} without a CSRF token answered {response.status_code}"
    print(f"\nCSRF: {len(targets)} console form targets refused without the token")


@pytest.mark.django_db
def test_api_session_writes_need_csrf_but_tokens_do_not(world):
    from tests.factories.tenancy import make_token

    client = Client(enforce_csrf_checks=True)
    client.force_login(world.a.user)
    response = client.post("/api/v1/tokens/", {"name": "x"}, content_type="application/json")
    assert response.status_code == 403
    _, secret = make_token(world.a)
    response = Client(enforce_csrf_checks=True).post("/api/v1/tokens/", {"name": "x"},
                                                     content_type="application/json",
                                                     HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 201


# --- passwords, lockout, throttles -------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("password", ["short1", "password1234", "12345678901234", "signup-user@example.com"])
def test_signup_refuses_weak_passwords(client, password):
    from tenancy.models import User

    response = client.post(reverse("console:signup"), {"email": "signup-user@example.com", "password1": password})
    assert response.status_code == 200  # the form again, with errors
    assert not User.objects.filter(email="signup-user@example.com").exists()


@pytest.mark.django_db
def test_login_lockout_after_failures(member_factory, settings):
    """django-axes locks username + IP after AXES_FAILURE_LIMIT failures, even for the right password."""
    from tests.factories.tenancy import PASSWORD

    m = member_factory()
    client = Client()
    for i in range(settings.AXES_FAILURE_LIMIT):  # case variants count against the same address
        name = m.user.email.upper() if i % 2 else m.user.email
        client.post(reverse("console:login"), {"username": name, "password": "wrong-password-1"})
    response = client.post(reverse("console:login"), {"username": m.user.email, "password": PASSWORD})
    assert response.status_code in (403, 429), response.status_code
    assert "_auth_user_id" not in client.session
    # Another address from the same IP is not locked (lockout is per username + IP).
    other = member_factory()
    ok = Client().post(reverse("console:login"), {"username": other.user.email, "password": PASSWORD})
    assert ok.status_code == 302


@pytest.mark.django_db
def test_signup_and_login_are_throttled_per_ip(monkeypatch, member_factory, settings):
    from tenancy.throttles import LoginRateThrottle, SignupRateThrottle

    settings.AXES_ENABLED = False
    monkeypatch.setattr(SignupRateThrottle, "THROTTLE_RATES", {"signup": "3/hour"})
    monkeypatch.setattr(LoginRateThrottle, "THROTTLE_RATES", {"login": "3/hour"})
    for i in range(3):
        r = Client(REMOTE_ADDR="203.0.113.7").post(reverse("console:signup"),
                                                   {"email": f"t{i}@example.com", "password1": "x"})
        assert r.status_code == 200
    assert Client(REMOTE_ADDR="203.0.113.7").post(
        reverse("console:signup"), {"email": "t9@example.com", "password1": "x"}).status_code == 429
    assert Client(REMOTE_ADDR="203.0.113.8").post(
        reverse("console:signup"), {"email": "t9@example.com", "password1": "x"}).status_code == 200
    m = member_factory()
    for _ in range(3):
        Client(REMOTE_ADDR="203.0.113.9").post(reverse("console:login"), {"username": m.user.email, "password": "no"})
    assert Client(REMOTE_ADDR="203.0.113.9").post(
        reverse("console:login"), {"username": m.user.email, "password": "no"}).status_code == 429


@pytest.mark.django_db
def test_api_is_throttled_per_token(monkeypatch, member_factory, token_client_for):
    from tenancy.throttles import TokenRateThrottle

    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"token": "3/min"})
    m = member_factory()
    first, second = token_client_for(m), token_client_for(m)
    for _ in range(3):
        assert first.get("/api/v1/organizations/current/").status_code == 200
    throttled = first.get("/api/v1/organizations/current/")
    assert throttled.status_code == 429 and throttled.json()["error"]["code"] == "throttled"
    assert int(throttled["Retry-After"]) > 0
    assert second.get("/api/v1/organizations/current/").status_code == 200  # per token, not per user


@pytest.mark.django_db
def test_topup_csp_follows_the_stripe_js_setting(world, console_client_for, settings):
    settings.STRIPE_JS_URL = "https://js.stripe.com/v3/"
    client = console_client_for(world.a)
    page = client.get(reverse("console:billing_topup"))
    assert page.status_code == 200
    csp = _csp(page)
    assert csp["script-src"] == ["'self'", "https://js.stripe.com"]
    assert "https://api.stripe.com" in csp["connect-src"] and "https://hooks.stripe.com" in csp["frame-src"]
    settings.STRIPE_JS_URL = "http://127.0.0.1:8420/js.stripe.com/v3/"  # localstripe's stand-in
    csp = _csp(client.get(reverse("console:billing_topup")))
    assert csp["script-src"] == ["'self'", "http://127.0.0.1:8420"]
    assert "https://js.stripe.com" not in " ".join(sum(csp.values(), []))
    assert "stripe" not in client.get(reverse("console:dashboard"))["Content-Security-Policy"]


@pytest.mark.django_db
def test_behind_a_proxy_lockout_and_audit_key_on_the_client_not_the_proxy(member_factory, settings):
    """NUM_PROXIES=1: the address the proxy appended is the client; what the client wrote before it is not."""
    from tenancy.models import AuditEvent
    from tests.factories.tenancy import PASSWORD

    settings.NUM_PROXIES = 1
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    m = member_factory()
    attacker = Client(**proxy, HTTP_X_FORWARDED_FOR="198.51.100.1")
    for i in range(settings.AXES_FAILURE_LIMIT):  # a forged left-hand entry changes nothing
        attacker.post(reverse("console:login"), {"username": m.user.email, "password": "wrong-password-1"},
                      HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 198.51.100.1")
    assert attacker.post(reverse("console:login"), {"username": m.user.email, "password": PASSWORD}).status_code \
        in (403, 429)
    # The real user, behind the same proxy from another address, still logs in.
    user = Client(**proxy, HTTP_X_FORWARDED_FOR="203.0.113.50")
    assert user.post(reverse("console:login"), {"username": m.user.email, "password": PASSWORD}).status_code == 302
    # The audit log records the client too.
    Client(**proxy, HTTP_X_FORWARDED_FOR="192.0.2.7, 203.0.113.51").post(
        reverse("console:signup"), {"email": "behind-proxy@example.com", "password1": "Tall-Giraffe-Orbit-93"})
    assert AuditEvent.objects.get(action="user.signup").ip == "203.0.113.51"


@pytest.mark.django_db
def test_without_proxies_x_forwarded_for_is_ignored(member_factory, settings):
    from tests.factories.tenancy import PASSWORD

    settings.NUM_PROXIES = 0
    m = member_factory()
    for i in range(settings.AXES_FAILURE_LIMIT):  # rotating the header does not dodge the lockout
        Client(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}").post(
            reverse("console:login"), {"username": m.user.email, "password": "wrong-password-1"})
    locked = Client(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR="192.0.2.99").post(
        reverse("console:login"), {"username": m.user.email, "password": PASSWORD})
    assert locked.status_code in (403, 429)


@pytest.mark.django_db
def test_a_garbage_forwarded_address_falls_back_to_the_peer(settings):
    """NUM_PROXIES set higher than the real proxy count lets the client write the chosen entry: it must be
    an IP address, or the peer's address is used (the audit log's column takes only addresses)."""
    from tenancy.models import AuditEvent

    settings.NUM_PROXIES = 2
    response = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="<script>, 203.0.113.9").post(
        reverse("console:signup"), {"email": "garbage-xff@example.com", "password1": "Tall-Giraffe-Orbit-93"})
    assert response.status_code == 302
    assert AuditEvent.objects.get(action="user.signup").ip == "10.0.0.2"
