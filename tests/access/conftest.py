"""Access tests (proxy, terminal): the e2e live settings and headless Chromium, as the console tests have them."""
import pytest

from tests.e2e.conftest import chromium_launched, e2e_env  # noqa: F401  (e2e_env: live-server settings, a fixture)


@pytest.fixture
def chromium():
    yield from chromium_launched()
