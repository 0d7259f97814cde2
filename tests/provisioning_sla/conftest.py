"""Fixtures for the SLA / waitlist / reconciler tests: a funded owner, its session client, a quiet simulator."""
import pytest

from tests.factories.provisioning import funded


@pytest.fixture(autouse=True)
def _deterministic_simulator(settings):
    # Random faults would make these tests flaky; they force faults through SimulatedFault rows.
    settings.SIMULATOR_FAILURE_SCALE = 0
    settings.SIMULATOR_DELAY_SCALE = 0


@pytest.fixture
def owner(member_factory):
    return funded(member_factory(role="owner"))


@pytest.fixture
def client(owner, session_client_for):
    return session_client_for(owner)
