"""Idempotency-Key for creating POSTs (SPEC §5).

Scope is (organization, credential, method, path); bodies are compared as canonical JSON.
Same key + same body → the original status and body; a different body → 422
`idempotency_key_reused`; a duplicate still running → 409 `idempotency_in_progress`. The record is
claimed by a unique insert in its own transaction, so concurrent duplicates create one object.

A request that died (worker killed) leaves its record `in_progress`. The request that works on a key
holds a session advisory lock on it until the view returns; the server drops the lock with the dead
process's connection. So a retry that takes the lock and finds an `in_progress` record knows its owner
is gone and claims the key afresh, and one that cannot take it answers 409.
"""
import contextlib
import functools
import hashlib
import json

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from .errors import ServiceError
from .locks import advisory_unlock, try_advisory_lock
from .models import IdempotencyRecord


class IdempotencyKeyReused(ServiceError):
    status, code = 422, "idempotency_key_reused"


class IdempotencyInProgress(ServiceError):
    status, code = 409, "idempotency_in_progress"


def canonical_hash(data) -> str:
    """sha256 of the body as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def credential_of(request) -> str:
    """Which credential made the request: an API token id, else the session's user."""
    auth = getattr(request, "auth", None)
    if auth is not None and getattr(auth, "pk", None) is not None:
        return f"token:{auth.pk}"
    user = getattr(request, "user", None)
    return f"user:{getattr(user, 'pk', None)}"


def _expired(record: IdempotencyRecord) -> bool:
    return record.created_at < timezone.now() - settings.IDEMPOTENCY_TTL


@contextlib.contextmanager
def _working_on(scope: dict):
    """Hold the key's session lock while the body runs; yields whether we have it.

    Taken before the record is inserted, so no one ever sees our record without our lock."""
    name = "idempotency:" + json.dumps(scope, sort_keys=True)
    held = try_advisory_lock(name)
    try:
        yield held
    finally:
        if held:
            advisory_unlock(name)


def _claim(scope: dict, body_hash: str) -> tuple[IdempotencyRecord, bool]:
    """Insert the in-progress record, or return the existing live one (created=False).

    Called holding the key's lock, so an in-progress record with our body is a dead request's."""
    for _ in range(3):
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(**scope, body_hash=body_hash), True
        except IntegrityError:
            existing = IdempotencyRecord.objects.filter(**scope).first()
            if existing is None:
                continue
            stale = existing.state == IdempotencyRecord.State.IN_PROGRESS and existing.body_hash == body_hash
            if stale or _expired(existing):
                existing.delete()  # the key may be used afresh
                continue
            return existing, False
    raise IdempotencyInProgress("A request with this Idempotency-Key is being processed.")


def _peek(scope: dict) -> IdempotencyRecord:
    """Another session works on the key: its finished record to replay, else 409 (never claim it)."""
    existing = IdempotencyRecord.objects.filter(**scope).first()
    if existing is None or _expired(existing):
        raise IdempotencyInProgress("A request with this Idempotency-Key is being processed.")
    return existing


def idempotent(redact: tuple[str, ...] = (), atomic: bool = True):
    """Decorate a DRF view method (self, request, ...) that creates something.

    `redact` names response fields stored as null (secrets are never stored: a replayed token
    creation answers `"token": null`). `atomic=False` for a view that calls another service over the
    network (Stripe): it commits its own rows before the call, so it must not run inside one transaction
    with the stored response; a request killed after such a call leaves a record the retry takes over.
    """

    def decorator(view_method):
        @functools.wraps(view_method)
        def wrapper(self, request, *args, **kwargs):
            key = request.headers.get("Idempotency-Key")
            if not key:
                return view_method(self, request, *args, **kwargs)
            if len(key) > 255:
                raise ServiceError(gettext("Idempotency-Key is longer than 255 characters."), details={"Idempotency-Key": [gettext("Too long.")]})
            org = getattr(request, "org", None)
            scope = {
                "organization_id": str(getattr(org, "pk", "") or ""),
                "credential": credential_of(request),
                "method": request.method,
                "path": request.path,
                "key": key,
            }
            body_hash = canonical_hash(request.data)
            with _working_on(scope) as held:
                record, created = _claim(scope, body_hash) if held else (_peek(scope), False)
                return _respond(record, created, body_hash, redact,
                                lambda: view_method(self, request, *args, **kwargs), atomic=atomic)

        return wrapper

    return decorator


class IdempotentResult:
    """What `idempotent_call` returns: the status and JSON body stored for the key, and whether it is a replay."""

    def __init__(self, status: int, body, replayed: bool):
        self.status, self.body, self.replayed = status, body, replayed


def idempotent_call(*, org_id, credential: str, method: str, path: str, key: str, body, run) -> IdempotentResult:
    """The same key handling as `idempotent`, for a caller that is not a DRF view (the console's create form).

    `run()` returns (status, JSON-able body) and runs in one transaction with the stored record; a ServiceError
    it raises rolls back and forgets the key (nothing was created, so resubmitting the same form tries again).
    Raises IdempotencyKeyReused / IdempotencyInProgress like the API."""
    if len(key) > 255:
        raise ServiceError(gettext("Idempotency-Key is longer than 255 characters."), details={"Idempotency-Key": [gettext("Too long.")]})
    scope = {"organization_id": str(org_id or ""), "credential": credential, "method": method, "path": path,
             "key": key}
    body_hash = canonical_hash(body)
    with _working_on(scope) as held:
        record, created = _claim(scope, body_hash) if held else (_peek(scope), False)
        if not created:
            if record.body_hash != body_hash:
                raise IdempotencyKeyReused(gettext("This Idempotency-Key was used with a different request body."))
            if record.state == IdempotencyRecord.State.IN_PROGRESS:
                raise IdempotencyInProgress("A request with this Idempotency-Key is being processed.")
            return IdempotentResult(record.status_code, record.response_body, True)
        try:
            with transaction.atomic():
                status, result = run()
                record.state = IdempotencyRecord.State.DONE
                record.status_code = status
                record.response_body = json.loads(json.dumps(result, cls=JSONEncoder))
                record.save(update_fields=["state", "status_code", "response_body"])
        except Exception:
            record.delete()
            raise
    return IdempotentResult(status, record.response_body, False)


def _respond(record: IdempotencyRecord, created: bool, body_hash: str, redact: tuple[str, ...], run_view, *,
             atomic: bool = True):
    """Replay or refuse for an existing record; else run the view and store its response."""
    if not created:
        if record.body_hash != body_hash:
            raise IdempotencyKeyReused(gettext("This Idempotency-Key was used with a different request body."))
        if record.state == IdempotencyRecord.State.IN_PROGRESS:
            raise IdempotencyInProgress("A request with this Idempotency-Key is being processed.")
        response = Response(record.response_body, status=record.status_code)
        response["Idempotent-Replayed"] = "true"
        return response
    try:
        # What the view writes and the stored response commit together: a request killed before the commit
        # leaves neither (a retry takes the key over and creates once), one killed after leaves both.
        with transaction.atomic() if atomic else contextlib.nullcontext():
            response = run_view()
            if response.status_code >= 500:
                raise _Discard(response)
            body = response.data
            if isinstance(body, dict) and redact:
                body = {k: (None if k in redact else v) for k, v in body.items()}
            record.state = IdempotencyRecord.State.DONE
            record.status_code = response.status_code
            record.response_body = json.loads(json.dumps(body, cls=JSONEncoder))  # as the renderer writes it
            record.save(update_fields=["state", "status_code", "response_body"])
    except _Discard as discard:
        record.delete()  # nothing was kept: let the client retry with the same key
        return discard.response
    except Exception:
        record.delete()
        raise
    return response


class _Discard(Exception):
    """A 5xx answer: roll the view's writes back with it and forget the key."""

    def __init__(self, response):
        super().__init__(response.status_code)
        self.response = response


def purge_expired() -> int:
    """Delete records older than the TTL; returns how many."""
    cutoff = timezone.now() - settings.IDEMPOTENCY_TTL
    return IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()[0]
