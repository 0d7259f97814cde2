"""Security test fixtures: two organizations (A holds the data, B is the attacker) and their clients."""
import uuid

import pytest

from tests.cachekeys import cache_clear_own
from tests.payments.conftest import localstripe_url, stripe_env  # noqa: F401  (fixtures reused)
from tests.registry_server import image_registry  # noqa: F401  (a real registry on loopback)
from tests.storage.s3_server import s3, s3_server  # noqa: F401  (fixtures reused)


@pytest.fixture(autouse=True)
def _clear_throttles():
    """Throttle and lockout counters live in the cache; every test starts from zero."""
    cache_clear_own()
    yield
    cache_clear_own()


class World:
    """Organization A (owner `a`, with data) and organization B (owner `b`, the other tenant)."""

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.markers: set[str] = set()

    def marker(self, kind: str) -> str:
        """A unique string stored in one of A's objects; B must never see it."""
        value = f"zq{kind}{uuid.uuid4().hex[:12]}"
        self.markers.add(value)
        return value


@pytest.fixture
def world(member_factory, catalog):
    from tests.factories.billing import fund

    a = member_factory(role="owner")
    b = member_factory(role="owner")
    w = World(a, b)
    a.organization.name = w.marker("orgname")
    a.organization.save(update_fields=["name"])
    a.user.name = w.marker("username")
    a.user.save(update_fields=["name"])
    # A distinctive amount on A's ledger: 123.456789 CNY must not show up in B's balance or statements.
    fund(a.organization, 123_456_789, key=f"security-fund:{a.organization_id}")
    w.markers.add("123.456789")
    return w


@pytest.fixture
def console_client_for(session_client_for):
    """client_for(membership) → a logged-in Django test client with that organization current."""
    return session_client_for


def assert_envelope(response, status: int, code: str | None = None) -> dict:
    """The SPEC §5 error envelope with this status (and code)."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"code", "message", "details"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["details"], dict)
    if code:
        assert err["code"] == code, err
    return err
