"""Fixtures of the inventory tests."""
import pytest

from tests.registry_server import image_registry  # noqa: F401 - a real registry on loopback


@pytest.fixture
def staff_client(member_factory, session_client_for):
    """A session client of an operator (staff user with an organization of their own)."""
    membership = member_factory(role="owner")
    membership.user.is_staff = True
    membership.user.save(update_fields=["is_staff"])
    client = session_client_for(membership)
    client.user = membership.user
    return client


@pytest.fixture
def capacity_events():
    """Collects capacity_changed notifications (a real listener in the real registry)."""
    from inventory import hooks

    seen: list[dict] = []

    def listener(**kwargs):
        seen.append(kwargs)

    hooks.register_capacity_listener(listener)
    yield seen
    hooks.unregister_capacity_listener(listener)
