"""Console test helpers: a funded owner on a small fleet, logged in with the Django test client."""
import pytest

from tests.cachekeys import cache_clear_own
from tests.e2e.conftest import chromium_launched, e2e_env  # noqa: F401  (e2e_env: live-server settings, a fixture)
from tests.factories.tenancy import login_client  # noqa: F401  (re-exported for the console tests)
from tests.registry_server import image_registry  # noqa: F401  (a real registry on loopback)


@pytest.fixture(autouse=True)
def _console_settings(settings):
    settings.SIMULATOR_FAILURE_SCALE = 0
    settings.SIMULATOR_DELAY_SCALE = 0
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache_clear_own()



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


@pytest.fixture
def chromium():
    """Headless Chromium for what depends on JavaScript being on or off (use with e2e_env and live_server)."""
    yield from chromium_launched()
