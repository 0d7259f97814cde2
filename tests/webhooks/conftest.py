import pytest

from .receiver import Receiver


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def loopback_allowed(settings):
    """The operator allow-list a test receiver on loopback needs (production refuses loopback)."""
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    return settings
