"""Console test helpers: a funded owner on a small fleet, logged in with the Django test client."""
import pytest
from django.core.cache import cache
from django.test import Client

from tenancy.middleware import SESSION_ORG_KEY


@pytest.fixture(autouse=True)
def _console_settings(settings):
    settings.SIMULATOR_FAILURE_SCALE = 0
    settings.SIMULATOR_DELAY_SCALE = 0
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()


def login_client(membership) -> Client:
    """A test client with the membership's user logged in and its organization current."""
    client = Client()
    client.force_login(membership.user)
    session = client.session
    session[SESSION_ORG_KEY] = str(membership.organization_id)
    session.save()
    return client


@pytest.fixture
def fleet(db):
    from tests.factories.provisioning import make_fleet

    return make_fleet(h100=2, ascend=1)


@pytest.fixture
def owner(member_factory, fleet):
    from tests.factories.provisioning import funded

    return funded(member_factory(role="owner"))


@pytest.fixture
def web(owner):
    return login_client(owner)
