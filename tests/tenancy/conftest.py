"""Tenancy test helpers: a clean throttle cache per test and a recording trial hook."""
import pytest

from tenancy import hooks
from tests.cachekeys import cache_clear_own


@pytest.fixture(autouse=True)
def _clear_throttles():
    """Throttle counters live in the cache; every test starts from zero."""
    cache_clear_own()
    yield
    cache_clear_own()


@pytest.fixture
def trial_calls():
    """Registers a fake trial hook (billing's stand-in) and yields the list of its calls."""
    calls: list[tuple] = []
    previous = hooks._trial_grant_fn
    hooks.register_trial_grant(lambda *, org, user: calls.append((org.pk, user.email)))
    yield calls
    hooks._trial_grant_fn = previous


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code, body
    return body["error"]


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings):
    """PBKDF2 at production cost dominates these tests' runtime; hashing strength is not under test here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
