"""A request that died mid-view (its worker killed) leaves its Idempotency-Key record `in_progress`. A retry
takes the key over once the dead request's connection is gone, and never while the first request still runs;
the key's lock is released whatever the view did."""
import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

from core.idempotency import canonical_hash
from core.models import IdempotencyRecord, OutboxMessage
from tests.core.urls import NEXT_GATES, Gate
from tests.races import Aside

from .test_api_conventions import assert_error

pytestmark = pytest.mark.urls("tests.core.urls")
URL = "/test/rows/"
BODY = {"name": "a"}


def post(body=BODY, key="k"):
    return APIClient().post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def rows() -> int:
    return OutboxMessage.objects.filter(task="test.row").count()


def kill_session(pid: int) -> None:
    """What the server sees when a worker process is killed: its session ends, and its locks go with it."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [pid])
        give_up = time.monotonic() + 10
        while time.monotonic() < give_up:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if not cur.fetchone()[0]:
                return
            time.sleep(0.02)
    raise AssertionError(f"session {pid} still there")


def advisory_locks_here() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND d.datname = current_database()")
        return cur.fetchone()[0]


@pytest.fixture(params=[False, True], ids=["autocommit", "atomic_requests"])
def atomic_requests(request, monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", request.param)
    return request.param


@pytest.fixture
def running_first():
    """The first request, in its own thread and connection, held inside the view with its key claimed."""
    gate = Gate()
    NEXT_GATES.append(gate)
    first = Aside(post)
    assert gate.entered.wait(10)
    yield gate, first
    gate.release.set()
    NEXT_GATES.clear()


@pytest.mark.django_db(transaction=True)
def test_a_retry_while_the_first_request_still_runs_is_409(atomic_requests, running_first):
    gate, first = running_first
    assert_error(post(), 409, "idempotency_in_progress")
    gate.release.set()
    created = first.result()
    assert created.status_code == 201
    again = post()
    assert (again.status_code, again.json(), again["Idempotent-Replayed"]) == (201, created.json(), "true")
    assert rows() == 1


@pytest.mark.django_db(transaction=True)
def test_a_retry_after_the_first_request_died_creates_once(atomic_requests, running_first):
    gate, first = running_first
    kill_session(gate.pid)
    retry = post()
    assert retry.status_code == 201, retry.content
    gate.release.set()
    try:  # the dead request goes on, but it has no connection to create anything with
        assert first.result().status_code >= 500
    except Exception:  # noqa: BLE001,S110 - the test client re-raises the view's database error
        pass
    assert rows() == 1
    assert OutboxMessage.objects.get(task="test.row").pk == retry.json()["id"]
    replay = post()
    assert (replay.status_code, replay.json()) == (201, retry.json())
    assert advisory_locks_here() == 0


@pytest.mark.django_db(transaction=True)
def test_a_request_killed_after_writing_its_object_but_before_storing_the_response_creates_once():
    """The object and the stored response commit together: before, the object was committed by the view and
    the retry that took the dead request's key over created a second one."""
    gate = Gate(after_create=True)
    NEXT_GATES.append(gate)
    first = Aside(post)
    try:
        assert gate.entered.wait(10)
        kill_session(gate.pid)
        retry = post()
        assert retry.status_code == 201, retry.content
    finally:
        gate.release.set()
        NEXT_GATES.clear()
    try:
        first.result()
    except Exception:  # noqa: BLE001,S110 - its connection is gone: the test client re-raises the DB error
        pass
    assert rows() == 1
    assert OutboxMessage.objects.get(task="test.row").pk == retry.json()["id"]


@pytest.mark.django_db
def test_a_dead_requests_record_is_reclaimed():
    """No session holds the key (its request died): the retry takes it over and creates once."""
    scope = {"organization_id": "", "credential": "user:None", "method": "POST", "path": URL, "key": "k"}
    IdempotencyRecord.objects.create(**scope, body_hash=canonical_hash(BODY))
    assert_error(post({"name": "other"}), 422, "idempotency_key_reused")  # another body is still refused
    retry = post()
    assert retry.status_code == 201 and rows() == 1
    assert IdempotencyRecord.objects.get(**scope).state == IdempotencyRecord.State.DONE


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fail,status", [(None, 201), ("400", 400), ("500", 500), ("sql", 500)])
def test_the_keys_lock_is_released_whatever_the_view_did(atomic_requests, fail, status):
    """Connections are persistent (CONN_MAX_AGE): a lock left held would answer 409 for the key afterwards."""
    client = APIClient(raise_request_exception=False)
    body = {"name": "a", "fail": fail}
    assert client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="k").status_code == status
    assert advisory_locks_here() == 0
    if status != 201:  # nothing stored: the same key works once the cause is gone
        assert post({"name": "a"}, key="k").status_code == 201
