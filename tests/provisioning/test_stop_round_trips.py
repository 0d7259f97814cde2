"""What a stop request costs is its round trips to PostgreSQL (the scale goals, SPEC §13: p99 ≤ 100 ms while a
tick runs, and every statement waits for a CPU on a busy machine). The stop of a running instance with an open
meter reads the clock once, takes no savepoint, finds and locks the organization's accounts with its credit
limit in one statement, closes the meter in the UPDATE that posts it, and marks its outbox row sent in one
statement after the publish."""
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories.provisioning import InstanceFactory

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# BEGIN; the instance; the clock; the meter; accounts with the credit limit; the spend keys; the transfer; the
# balances; the charge detail; the meter posted and closed; the card incidents; the instance; its event; the
# audit row; the outbox row; COMMIT; the outbox row marked sent.
STOP_STATEMENTS = 17


def _running_with_meter(owner):
    from billing.models import Meter
    from billing.services import meter_open

    instance = InstanceFactory(organization=owner.organization, creator=owner.user, state="running")
    meter = meter_open(org=owner.organization, instance_id=instance.pk, item_index=0, accelerator="h100-sxm-80g",
                       cards=2, rate=1_900_000)
    Meter.objects.filter(pk=meter.pk).update(opened_at=meter.opened_at - timedelta(seconds=3600))
    return instance, meter


def test_a_stop_makes_a_fixed_small_number_of_statements_and_bills_exactly(owner):
    from billing.models import MeterCharge, Transfer
    from core.models import OutboxMessage
    from provisioning.services.instances import instance_stop

    warm, _ = _running_with_meter(owner)  # the first spend of an organization may create its accounts
    instance_stop(org=owner.organization, instance_id=warm.pk, actor=owner.user)
    instance, meter = _running_with_meter(owner)
    with CaptureQueriesContext(connection) as statements:
        instance_stop(org=owner.organization, instance_id=instance.pk, actor=owner.user)
    sql = [q["sql"] for q in statements.captured_queries]
    assert not [s for s in sql if "SAVEPOINT" in s], sql
    assert sum("statement_timestamp()" in s and s.lstrip().upper().startswith("SELECT STATEMENT") for s in sql) == 1
    assert len(sql) == STOP_STATEMENTS, "\n".join(sql)

    meter.refresh_from_db()
    instance.refresh_from_db()
    assert instance.state == "stopping" and meter.closed_at is not None
    seconds = int((meter.closed_at - meter.opened_at).total_seconds())
    assert meter.posted_through_seconds == seconds >= 3600
    assert meter.posted_amount == 2 * 1_900_000 * seconds // 3600  # the cumulative floor, exact to the µCNY
    assert sum(Transfer.objects.filter(meter_id=meter.pk).values_list("amount", flat=True)) == meter.posted_amount
    assert sum(MeterCharge.objects.filter(meter_id=meter.pk).values_list("amount", flat=True)) == meter.posted_amount
    message = OutboxMessage.objects.filter(args=[str(instance.pk)]).get()
    assert message.sent_at is not None and message.attempts == 1


def test_a_spend_of_a_new_organization_creates_its_accounts_and_reads_its_credit_limit(member_factory):
    """The one-statement lock finds nothing for an organization that never spent: the accounts and the profile are
    created, and a postpaid organization's credit limit is honoured."""
    from billing.funds import balances_of, spend
    from tests.factories.billing import set_credit_limit

    org = member_factory(role="owner").organization
    uncharged = spend(org=org, amount=500, key="test-new-org-spend", code="meter")
    assert uncharged == 500 and balances_of(org)["cash"] == 0
    set_credit_limit(org, 300)
    assert spend(org=org, amount=500, key="test-new-org-spend-2", code="meter") == 200
    assert balances_of(org)["cash"] == -300


def test_a_spend_with_a_reused_key_is_refused_and_the_callers_transaction_goes_on(member_factory):
    """The spend takes no savepoint, so its refusal is raised outside its block: the caller's transaction (here
    the test's) is still usable and nothing was posted."""
    from django.db import transaction

    from billing.funds import balances_of, spend
    from billing.ledger import TransferKeyReused
    from tests.factories.billing import fund

    org = member_factory(role="owner").organization
    fund(org, 10_000)
    with transaction.atomic():
        assert spend(org=org, amount=100, key="test-reused", code="meter") == 0
        with pytest.raises(TransferKeyReused):
            spend(org=org, amount=100, key="test-reused", code="package")
        assert spend(org=org, amount=100, key="test-reused", code="meter") == 0  # a replay: nothing new
    assert balances_of(org)["cash"] == 10_000 - 100


def test_a_stop_request_answers_the_body_get_shows_with_one_statement_for_it(owner, client, member_factory):
    """The API stop: the session's three reads, the stop's statements, and its answer from the list's one
    statement (not the detail's query per figure); the same body GET shows; 404 for another organization's id,
    with or without a body; 400 for a body the action does not read."""
    from tests.factories.provisioning import funded

    instance, _ = _running_with_meter(owner)
    warm, _ = _running_with_meter(owner)
    client.post(f"/api/v1/instances/{warm.pk}/stop/", {}, content_type="application/json")
    with CaptureQueriesContext(connection) as statements:
        answer = client.post(f"/api/v1/instances/{instance.pk}/stop/", {}, content_type="application/json")
    assert answer.status_code == 202, answer.content
    assert len(statements.captured_queries) == 3 + STOP_STATEMENTS + 1
    shown = client.get(f"/api/v1/instances/{instance.pk}/").json()
    assert answer.json() == shown and shown["state"] == "stopping"

    other = funded(member_factory(role="owner"))
    theirs, _ = _running_with_meter(other)
    for body in ({}, {"force": True}):
        refused = client.post(f"/api/v1/instances/{theirs.pk}/stop/", body, content_type="application/json")
        assert refused.status_code == 404, refused.content
    theirs.refresh_from_db()
    assert theirs.state == "running"
    mine, _ = _running_with_meter(owner)
    refused = client.post(f"/api/v1/instances/{mine.pk}/stop/", {"force": True}, content_type="application/json")
    assert refused.status_code == 400 and refused.json()["error"]["details"].keys() == {"force"}


@pytest.mark.parametrize("action", ["stop", "start", "move"])
def test_an_action_on_a_malformed_id_answers_404(client, action):
    answer = client.post(f"/api/v1/instances/not-a-uuid/{action}/", {}, content_type="application/json")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
