"""Schemathesis against /api/v1/schema/ with an owner's write token in an organization with data.

Bounded for CI: MAX_EXAMPLES per operation (positive), NEGATIVE_EXAMPLES (negative), derandomized.
Checks: no 5xx, status codes / content types / bodies conform to the schema, every error is the
SPEC §5 envelope, negative (schema-violating) input never causes a 5xx.
"""
import json
import os
import time

import pytest

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = int(os.environ.get("SECURITY_FUZZ_EXAMPLES", "20"))
NEGATIVE_EXAMPLES = int(os.environ.get("SECURITY_FUZZ_NEGATIVE_EXAMPLES", "8"))
# Own authentication (Stripe signature, node tokens): fuzzed by their owners' tests, not with a user token.
EXCLUDED_PATHS = ("/api/v1/billing/stripe/webhook/", "/api/v1/agent/")


def envelope_check(ctx, response, case):
    """Every 4xx/5xx JSON answer is {"error": {"code", "message", "details"}}."""
    if response.status_code < 400:
        return None
    body = json.loads(response.content)
    assert set(body) == {"error"}, f"not the error envelope: {body}"
    assert set(body["error"]) == {"code", "message", "details"}, f"not the error envelope: {body}"
    assert isinstance(body["error"]["details"], dict)
    return True


@pytest.fixture
def wsgi_app():
    """The real WSGI handler, without closing the test transaction's connection after each request
    (what Django's own test client does too)."""
    from django.core import signals
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_org(member_factory, token_client_for, catalog, stripe_env):
    from billing.models_payments import TopUp
    from billing.models_products import Invoice, SponsorshipProposal
    from tests.factories.provisioning import InstanceFactory, funded, make_fleet
    from tests.factories.tenancy import SshKeyFactory

    make_fleet(h100=2, ascend=1)
    owner = funded(member_factory(role="owner"))
    owner.user.is_staff = True  # an operator too, so the admin API is fuzzed beyond its 403
    owner.user.save(update_fields=["is_staff"])
    org = owner.organization
    member_factory(role="viewer", org=org)
    SshKeyFactory(user=owner.user)
    for state in ("running", "stopped", "terminated"):
        InstanceFactory(organization=org, state=state)
    TopUp.objects.create(organization=org, amount=50_000_000, amount_fen=5_000)
    SponsorshipProposal.objects.create(organization=org, title="t", abstract="a", accelerator="h100-sxm-80g",
                                       card_hours=5)
    Invoice.objects.create(organization=org, period="2026-01-01", amount_due=1_234_567)
    return token_client_for(owner)


def _fuzz(op, mode, count: int, headers: dict) -> int:
    """Run `count` derandomized examples of one operation; returns how many ran (raises on failures)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

    ran = [0]

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case):
        ran[0] += 1
        response = case.call(headers=headers)
        # positive_data_acceptance is off: schema-valid bodies may still fail business validation (400).
        # negative_data_rejection is off: django-filter reads an empty filter value (`?health=`) as "no
        # filter" and DRF ignores unknown fields, by design; every other check stays on.
        case.validate_response(response, additional_checks=[envelope_check], headers=headers,
                               excluded_checks=[positive_data_acceptance, negative_data_rejection])

    try:
        run()
    finally:
        _fuzz.examples += ran[0]
    return ran[0]


@pytest.mark.timeout(900)  # one test over every operation: it grows with the API (bounded by the examples)
def test_schemathesis_finds_no_server_errors_or_schema_violations(fuzz_org, wsgi_app, capsys, settings):
    import schemathesis

    # Registering a custom image asks its registry over the network: fuzzed references must reach no host at all.
    settings.CUSTOM_IMAGE_REGISTRIES = ["registry.invalid"]

    headers = {"Authorization": f"Bearer {fuzz_org.secret}"}
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", wsgi_app)
    operations = [r.ok() for r in schema.get_all_operations()]
    operations = [op for op in operations if not op.path.startswith(EXCLUDED_PATHS)]
    assert len(operations) >= 30, [op.label for op in operations]
    failures: dict[str, str] = {}
    _fuzz.examples = 0
    started = time.monotonic()
    for op in operations:
        for mode, count in ((schemathesis.GenerationMode.POSITIVE, MAX_EXAMPLES),
                            (schemathesis.GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)):
            try:
                _fuzz(op, mode, count, headers)
            except (Exception, BaseExceptionGroup) as exc:  # collect, so one run reports every failing operation
                inner = "; ".join(str(e)[:600] for e in getattr(exc, "exceptions", ()))  # e.g. a Flaky's cause
                failures[f"{op.label} [{mode.value}]"] = f"{str(exc)[:1500]} {inner}"
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nschemathesis: {len(operations)} operations, {_fuzz.examples} examples in {elapsed:.0f}s; "
              f"{len(failures)} failing")
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
