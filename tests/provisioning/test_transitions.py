"""The transition table (SPEC §3) and the one function that applies it."""
import pytest
from django.db import transaction

from core.errors import InvalidState
from provisioning.choices import INSTANCE_TRANSITIONS, InstanceState, can_transition
from provisioning.models import InstanceEvent
from provisioning.services.transitions import instance_transition
from tests.factories.provisioning import InstanceFactory

S = InstanceState
SPEC_TABLE = {
    "pending": {"provisioning", "waitlisted", "terminating", "failed"},
    "waitlisted": {"provisioning", "terminating"},
    "provisioning": {"checking", "provisioning", "terminating", "failed"},
    "checking": {"running", "provisioning", "terminating", "failed"},
    # Beyond SPEC §3: a node dark past NODE_DARK_TIMEOUT_SECONDS fails or moves its instance (services/dark.py).
    "running": {"stopping", "terminating", "failed", "provisioning"},
    "stopping": {"stopped", "terminating"},
    "stopped": {"starting", "terminating"},
    "starting": {"provisioning", "waitlisted", "terminating", "failed"},
    "failed": {"terminating"},
    "terminating": {"terminated"},
    "terminated": set(),
}
ALLOWED = [(a, b) for a, targets in SPEC_TABLE.items() for b in sorted(targets)]
FORBIDDEN = [("running", "running"), ("running", "checking"), ("terminated", "terminating"),
             ("terminated", "running"), ("stopped", "running"), ("failed", "running"), ("pending", "running"),
             ("waitlisted", "running"), ("stopping", "running"), ("terminating", "stopped"),
             ("checking", "stopped"), ("starting", "running")]


def test_table_is_the_spec_verbatim():
    assert {k: set(v) for k, v in INSTANCE_TRANSITIONS.items()} == SPEC_TABLE
    assert set(INSTANCE_TRANSITIONS) == set(S.values)


@pytest.mark.parametrize(("src", "dst"), ALLOWED)
def test_allowed(src, dst):
    assert can_transition(src, dst)


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN)
def test_forbidden(src, dst):
    assert not can_transition(src, dst)


@pytest.mark.django_db
@pytest.mark.parametrize(("src", "dst"), [("pending", "provisioning"), ("checking", "running"),
                                          ("stopped", "starting"), ("failed", "terminating")])
def test_transition_records_an_event(src, dst):
    inst = InstanceFactory(state=src)
    with transaction.atomic():
        event = instance_transition(instance=inst, to=dst, reason="because")
    inst.refresh_from_db()
    assert inst.state == dst
    assert (event.from_state, event.to_state, event.reason) == (src, dst, "because")
    assert InstanceEvent.objects.filter(instance=inst).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(("src", "dst"), FORBIDDEN[:6])
def test_illegal_transition_raises_409_and_changes_nothing(src, dst):
    inst = InstanceFactory(state=src)
    with pytest.raises(InvalidState) as exc, transaction.atomic():
        instance_transition(instance=inst, to=dst)
    assert exc.value.status == 409 and exc.value.code == "invalid_state"
    inst.refresh_from_db()
    assert inst.state == src
    assert not InstanceEvent.objects.filter(instance=inst).exists()
