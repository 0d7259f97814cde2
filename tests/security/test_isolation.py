"""SPEC §2 isolation, exhaustively: every URL pattern of the URLconf, called as another tenant."""
from collections import Counter

import pytest
from django.urls import reverse

from . import registry
from .conftest import assert_envelope
from .urlwalk import walk

pytestmark = pytest.mark.django_db

ROUTES = walk()
BY_NAME = {r.name: r for r in ROUTES}
CODES = {404: "not_found", 403: "permission_denied"}
EXPECTED_SKIPS = 43  # the SKIP table's size: grows only by a deliberate edit here and there (i18n: +2; allauth's
# sign-up, verification and reset steps: +5)


def _skipped(route) -> bool:
    return route.name in registry.SKIP or route.name.split(":")[0] in registry.SKIP_NAMESPACES


def _snapshot(row) -> dict:
    row.refresh_from_db()
    return {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}


def test_every_url_pattern_is_classified():
    """A new URL pattern must get a factory, a tenant-list entry or a deliberate skip."""
    unclassified = [f"{r.name or '<unnamed>'} {r.route}" for r in ROUTES
                    if not _skipped(r) and r.name not in registry.OBJECT_FACTORIES
                    and r.name not in registry.TENANT_LISTS]
    assert not unclassified, f"URL patterns without a security classification: {unclassified}"
    # Patterns that name an object must have a factory (not just a list entry).
    with_ids = [r.name for r in ROUTES if r.kwargs and not _skipped(r)]
    assert set(with_ids) <= set(registry.OBJECT_FACTORIES), set(with_ids) - set(registry.OBJECT_FACTORIES)
    # No stale entries, and the skip-list is as large as we think.
    names = set(BY_NAME)
    assert set(registry.OBJECT_FACTORIES) <= names, set(registry.OBJECT_FACTORIES) - names
    assert registry.TENANT_LISTS <= names, registry.TENANT_LISTS - names
    assert set(registry.SKIP) <= names, set(registry.SKIP) - names
    assert len(registry.SKIP) == EXPECTED_SKIPS
    counts = Counter("skip" if _skipped(r) else "object" if r.kwargs else "list" for r in ROUTES)
    admin = sum(1 for r in ROUTES if r.name.split(":")[0] in registry.SKIP_NAMESPACES)
    print(f"\nURL patterns: {len(ROUTES)} total; {counts['object']} with object ids walked; "
          f"{counts['list']} tenant lists scanned; {counts['skip']} skipped "
          f"({len(registry.SKIP)} by name + {admin} Django admin)")


def _call(client, route, method, url, body):
    body = body if method in ("post", "put", "patch") else None
    if route.is_drf:
        return getattr(client, method)(url, body or None, format="json")
    return getattr(client, method)(url, body or {})


def _check(route, method, response, expect):
    if not route.is_drf and response.status_code == 405:
        return False  # a console view that does not answer this method at all
    if route.name.startswith("api:"):
        if expect in CODES:
            assert_envelope(response, expect, CODES[expect])
        else:
            assert response.status_code == expect, (route.name, method, response.status_code, response.content[:300])
    else:
        assert response.status_code == expect, (route.name, method, response.status_code, response.content[:300])
    return True


WITH_IDS = sorted(n for n, r in BY_NAME.items() if r.kwargs and not _skipped(r))
CALLS = [(n, c) for n in WITH_IDS for c in (("token", "session") if n.startswith("api:") else ("session",))]


@pytest.mark.parametrize("name,credential", CALLS)
def test_foreign_object_ids_answer_404(name, credential, world, token_client_for, console_client_for):
    """As the owner of B (API: write token or session; console: session), every method on A's object → 404
    (403 where the object is not tenant-owned: the staff admin API)."""
    route = BY_NAME[name]
    factory = registry.OBJECT_FACTORIES.get(name)
    assert factory is not None, f"{name}: no object factory in tests/security/registry.py"
    target = factory(world)
    before = _snapshot(target.row) if target.row is not None else None
    url = reverse(name, kwargs=target.kwargs)
    client = token_client_for(world.b) if credential == "token" else console_client_for(world.b)
    answered = 0
    for method in route.methods:
        response = _call(client, route, method, url, target.body)
        answered += _check(route, method, response, target.expect)
        text = response.content.decode(errors="replace")
        leaked = [m for m in world.markers if m in text]
        assert not leaked, f"{name} {method.upper()} shows organization A's data: {leaked}"
    assert answered, f"{name}: no method answered"
    if before is not None:
        assert _snapshot(target.row) == before, f"{name}: organization B changed A's object"


@pytest.mark.parametrize("name", sorted(registry.TENANT_LISTS))
def test_lists_show_no_other_tenant_data(name, world, token_client_for, console_client_for):
    """Every per-organization page without an id, read by B, contains none of A's markers or ids."""
    made = [f(world) for f in (registry.member, registry.token, registry.ssh_key, registry.topup,
                               registry.sponsorship, registry.invoice, registry.instance,
                               registry.stopped_instance_volume)]
    secrets = set(world.markers) | {str(v) for t in made for v in t.kwargs.values()}
    route = BY_NAME[name]
    client = token_client_for(world.b) if name.startswith("api:") else console_client_for(world.b)
    response = client.get(reverse(name))
    assert response.status_code < 500, (name, response.status_code)
    text = response.content.decode(errors="replace")
    leaked = [s for s in secrets if s in text]
    assert not leaked, f"{name} shows organization A's data: {leaked}"
    assert route.methods


def test_session_cannot_select_another_organization(world, console_client_for):
    """B's session pointed at A's organization (forged or via the switch form) never makes A current."""
    from tenancy.middleware import SESSION_ORG_KEY

    client = console_client_for(world.b)
    response = client.post(reverse("console:organization_switch"), {"organization": str(world.a.organization_id)})
    assert response.status_code == 302
    session = client.session
    assert session.get(SESSION_ORG_KEY) != str(world.a.organization_id)
    session[SESSION_ORG_KEY] = str(world.a.organization_id)  # as if the session store were tampered with
    session.save()
    for name in ("console:dashboard", "console:instance_list", "console:members", "console:billing"):
        text = client.get(reverse(name)).content.decode(errors="replace")
        assert not [m for m in world.markers if m in text], name
    assert client.get("/api/v1/organizations/current/").json().get("id") != str(world.a.organization_id)
