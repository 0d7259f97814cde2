"""Unknown fields are refused everywhere (SPEC §5): every write method of every API URL pattern, called by the
owner of the object's organization with a body holding one field the endpoint does not know, answers 400
validation_error naming that field, and changes nothing. Walks the same URL table as the isolation test, so a new
endpoint is covered without being listed here (the agent endpoints, node-token auth, are skipped with the rest)."""
import pytest
from django.db import transaction
from django.urls import reverse

from . import registry
from .conftest import assert_envelope
from .test_isolation import ROUTES, _skipped, _snapshot

pytestmark = pytest.mark.django_db
UNKNOWN = "zz_not_a_field"
WRITES = ("post", "put", "patch", "delete")


def _routes():
    for route in ROUTES:
        if route.name.startswith("api:") and not _skipped(route) and any(m in WRITES for m in route.methods):
            yield route


class _Rollback(Exception):
    pass


def _try_route(route, world, client) -> tuple[int, list[str]]:
    """Call each write method of one pattern on A's object (made by the isolation walk's factory); returns how
    many calls were made and what went wrong."""
    failures, calls = [], 0
    if route.kwargs:
        target = registry.OBJECT_FACTORIES[route.name](world)
        url, body, row = reverse(route.name, kwargs=target.kwargs), target.body, target.row
    else:
        url, body, row = reverse(route.name), {}, None
    for method in (m for m in route.methods if m in WRITES):
        before = _snapshot(row) if row is not None else None
        response = getattr(client, method)(url, {**body, UNKNOWN: 1}, format="json")
        if response.status_code == 405:  # a method the pattern's view class has but does not answer (PUT)
            continue
        calls += 1
        try:
            err = assert_envelope(response, 400, "validation_error")
            assert UNKNOWN in err["details"], err
            if before is not None:
                assert _snapshot(row) == before, "changed"
        except AssertionError as exc:
            failures.append(f"{method.upper()} {route.name}: {str(exc)[:200]}")
    return calls, failures


def test_every_write_endpoint_names_an_unknown_field(world, token_client_for):
    world.a.user.is_staff = True  # the operators' admin API too
    world.a.user.save(update_fields=["is_staff"])
    client = token_client_for(world.a)
    failures, checked = [], 0
    for route in _routes():
        try:
            with transaction.atomic():  # each pattern's objects made and dropped on their own
                calls, failed = _try_route(route, world, client)
                raise _Rollback
        except _Rollback:
            checked += calls
            failures += failed
    assert checked > 30
    assert not failures, "\n".join(failures)


def test_an_instance_create_with_an_unknown_field_is_a_400_naming_it_and_creates_nothing(world, token_client_for):
    from provisioning.models import Instance
    from tenancy.models import AuditEvent
    from tests.factories.provisioning import container_body, make_fleet

    make_fleet(h100=1)
    before = AuditEvent.objects.count()
    response = token_client_for(world.a).post("/api/v1/instances/", container_body(volume=[{"volume": "x"}],
                                                                                   colour="red"), format="json")
    err = assert_envelope(response, 400, "validation_error")
    assert set(err["details"]) == {"volume", "colour"}
    assert err["details"]["colour"] == ["Unknown field."]
    assert not Instance.objects.exists() and AuditEvent.objects.count() == before
    nested = token_client_for(world.a).post(
        "/api/v1/instances/", container_body(items=[{"accelerator": "h100-sxm-80g", "count": 1, "cout": 2}]),
        format="json")
    assert "items.0.cout" in assert_envelope(nested, 400, "validation_error")["details"]
    assert not Instance.objects.exists()
