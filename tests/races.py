"""Lock races between real PostgreSQL connections: each side runs in its own thread, so its own connection
(closed when it ends). Use with `@pytest.mark.django_db(transaction=True)`, so every side sees commits."""
import threading

from django.db import connection, transaction

from inventory.choices import NodeState
from inventory.lock_objects import node_lock


class Aside:
    """`fn()` running in another thread (another database connection); `result()` joins it."""

    def __init__(self, fn):
        self._value, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(fn,))
        self._thread.start()

    def _run(self, fn):
        try:
            self._value = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result() in the test's thread
            self._error = exc
        finally:
            connection.close()

    def running(self, wait: float = 0.0) -> bool:
        self._thread.join(wait)
        return self._thread.is_alive()

    def result(self, timeout: float = 10):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the other side did not finish"
        if self._error is not None:
            raise self._error
        return self._value


def race_with_operator_quarantine(node, action) -> list:
    """Run `action` in a thread while an operator holds the node's row lock and then quarantines it; the action
    must wait for the lock. Returns [what action returned]; raises what it raised."""
    locked, release = threading.Event(), threading.Event()

    def operator():
        with transaction.atomic():
            row = node_lock(node.pk)
            locked.set()
            release.wait(10)
            row.state, row.state_reason = NodeState.QUARANTINED, "operator: bad PSU"
            row.save(update_fields=["state", "state_reason"])

    op = Aside(operator)
    assert locked.wait(10)
    worker = Aside(action)
    assert worker.running(0.5)  # waiting for the node's row lock
    release.set()
    op.result()
    return [worker.result()]


def assert_organization_not_row_locked(queries) -> None:
    """No statement of `queries` (a CaptureQueriesContext) takes FOR UPDATE on the organization's row: that
    blocks every insert referencing it (audit events, instances) meanwhile. select_related rows are locked too
    unless the lock says `of=("self",)`; the organization's own lock is FOR NO KEY UPDATE (lock_objects.py)."""
    for query in queries.captured_queries:
        sql = query["sql"]
        if " FOR UPDATE" in sql and '"tenancy_organization"' in sql:
            assert " FOR UPDATE OF " in sql and '"tenancy_organization"' not in sql.split(" FOR UPDATE OF ")[1], sql


def meanwhile(monkeypatch, owner, name: str, make) -> None:
    """Patch `owner.name` (e.g. an admin's save_model) so that, on its next call, `make()` first runs and commits
    on another connection: a concurrent write landing between a form's validation and its save."""
    original, pending = getattr(owner, name), [make]

    def hooked(*args, **kwargs):
        while pending:
            Aside(pending.pop()).result()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)
