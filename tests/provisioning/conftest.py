"""Shared fixtures: a funded owner with a session client, and the simulator set to never fail by chance."""
import pytest


@pytest.fixture(autouse=True)
def _deterministic_simulator(settings):
    # Random faults (1 % boot failure, 2 % low bandwidth…) would make tests flaky; tests force faults explicitly.
    settings.SIMULATOR_FAILURE_SCALE = 0
    settings.SIMULATOR_DELAY_SCALE = 0


@pytest.fixture
def owner(member_factory):
    from tests.factories.provisioning import funded

    return funded(member_factory(role="owner"))


@pytest.fixture
def client(owner, session_client_for):
    return session_client_for(owner)
