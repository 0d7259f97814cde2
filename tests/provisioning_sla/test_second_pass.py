"""The second pass before quarantine: cards that failed readiness or report degraded are re-tested once on release
(steps in this process, the simulated driver; the worker's run is in test_worker.py)."""
import pytest

from inventory.models import Card, Node
from provisioning.models import CardRetest, Instance, NodeGroup, ReadinessReport
from provisioning.services.fleet import fault_force
from provisioning.services.retest import RetestWaits, card_retest_run
from provisioning.tasks import instance_advance
from tenancy.models import AuditEvent
from tests.factories.provisioning import container_body, make_fleet

from .helpers import URL

pytestmark = pytest.mark.django_db


def _create(client, count=8, **extra) -> str:
    r = client.post(URL, container_body("h100-sxm-80g", count, **extra), format="json")
    assert r.status_code in (201, 202), r.json()
    return r.json()["id"]


def _node_of(iid) -> Node:
    return NodeGroup.objects.select_related("node").get(instance_id=iid, released_at__isnull=True).node


def _healths(node) -> list[str]:
    return list(Card.objects.filter(node=node).order_by("index").values_list("health", flat=True))


def test_cards_that_fail_readiness_pass_their_second_pass_and_return_to_the_pool(client):
    make_fleet(h100=2)
    iid = _create(client)
    bad = _node_of(iid)
    fault_force(node=bad, operation="readiness", faults=["data_errors"], times=2)  # both attempts of the check
    assert instance_advance(iid) == "running"
    bad.refresh_from_db()
    # Held out of the pool until its second pass, not quarantined for good at once.
    assert bad.state == "quarantined" and bad.state_reason.startswith("second pass pending: readiness failed")
    assert _healths(bad) == ["degraded"] * 8
    assert _node_of(iid).pk != bad.pk
    retest = CardRetest.objects.get(node=bad)
    assert (retest.cause, retest.state, retest.card_indices) == ("readiness_failed", "pending", list(range(8)))
    assert retest.first_report.passed is False and retest.first_report.attempt == 2

    assert card_retest_run(retest_id=retest.pk) == "passed"
    retest.refresh_from_db()
    bad.refresh_from_db()
    assert retest.state == "passed" and retest.finished_at is not None
    assert retest.second_report.passed and retest.second_report.scope == "second_pass"
    assert retest.second_report.cards == list(range(8)) and retest.second_report.node_id == bad.pk
    assert _healths(bad) == ["ok"] * 8 and bad.state == "available"
    assert AuditEvent.objects.filter(action="card.health", details__to="ok").count() == 8
    # The platform's second pass is not the customer's readiness history.
    scopes = [r["scope"] for r in client.get(f"{URL}{iid}/readiness/").json()["results"]]
    assert scopes == ["intra_node", "intra_node", "intra_node"]
    # Run again (a redelivered task): nothing more happens.
    assert card_retest_run(retest_id=retest.pk) == "passed"
    assert ReadinessReport.objects.filter(scope="second_pass").count() == 1


def test_cards_that_fail_twice_quarantine_the_node_with_both_reports(client, operator_client):
    make_fleet(h100=2)
    iid = _create(client)
    bad = _node_of(iid)
    fault_force(node=bad, operation="readiness", faults=["low_bandwidth"])  # every run on it
    assert instance_advance(iid) == "running"
    retest = CardRetest.objects.get(node=bad)
    assert card_retest_run(retest_id=retest.pk) == "failed"
    retest.refresh_from_db()
    bad.refresh_from_db()
    assert bad.state == "quarantined"
    first, second = retest.first_report, retest.second_report
    assert not first.passed and not second.passed and first.pk != second.pk
    assert f"report #{first.pk}" in bad.state_reason and f"report #{second.pk}" in bad.state_reason
    assert "second pass failed on cards" in bad.state_reason and str(iid) in bad.state_reason
    assert _healths(bad) == ["degraded"] * 8  # never placed again until an operator says so
    assert AuditEvent.objects.filter(action="node.quarantined", target_id=str(bad.pk)).exists()
    # The operator's evidence: both reports, their verdicts and raw output, on the retest's admin page.
    page = operator_client.get(f"/admin/provisioning/cardretest/{retest.pk}/change/").content.decode()
    assert f"report #{first.pk}" in page and f"report #{second.pk}" in page
    assert "below floor" in page or "floor" in page
    assert first.raw_output.splitlines()[0][:40] in page
    listing = operator_client.get("/admin/provisioning/cardretest/").content.decode()
    assert bad.hostname in listing and "failed" in listing


def test_a_degraded_card_is_retested_on_release_and_returns_when_it_passes(client):
    (node,) = make_fleet(h100=1)
    iid = _create(client, count=2)
    assert instance_advance(iid) == "running"
    card = Card.objects.get(node=node, index=1)
    Card.objects.filter(pk=card.pk).update(health="degraded")  # the agent's health signal (another module)
    assert client.delete(f"{URL}{iid}/").status_code == 202
    assert instance_advance(iid) == "terminated"
    retest = CardRetest.objects.get(node=node)
    assert (retest.cause, retest.card_indices, retest.first_report) == ("degraded", [1], None)
    assert card_retest_run(retest_id=retest.pk) == "passed"
    retest.refresh_from_db()
    assert retest.second_report.tool == "nvidia-smi" and retest.second_report.passed  # one card: device health
    assert _healths(node) == ["ok"] * 8
    assert CardRetest.objects.count() == 1  # the healthy card of the instance got none


def test_a_degraded_card_failing_its_second_pass_quarantines_the_node(client):
    (node,) = make_fleet(h100=1)
    iid = _create(client, count=2)
    assert instance_advance(iid) == "running"
    Card.objects.filter(node=node, index__in=[0, 1]).update(health="degraded")
    fault_force(node=node, operation="readiness", faults=["data_errors"])
    client.post(f"{URL}{iid}/stop/")
    assert instance_advance(iid) == "stopped"
    retest = CardRetest.objects.get(node=node)
    assert retest.card_indices == [0, 1]
    assert card_retest_run(retest_id=retest.pk) == "failed"
    node.refresh_from_db()
    assert node.state == "quarantined" and "first: health reported degraded" in node.state_reason
    assert f"second (report #{CardRetest.objects.get().second_report_id})" in node.state_reason


def test_a_bare_metal_node_is_retested_after_its_cleaning(client):
    (node,) = make_fleet(h100=1)
    r = client.post(URL, {**container_body("h100-sxm-80g", 8), "kind": "bare_metal"}, format="json")
    iid = r.json()["id"]
    assert instance_advance(iid) == "running"
    Card.objects.filter(node=node, index=3).update(health="degraded")
    assert client.delete(f"{URL}{iid}/").status_code == 202
    assert instance_advance(iid) == "terminated"
    node.refresh_from_db()
    assert node.state == "cleaning"
    retest = CardRetest.objects.get(node=node)
    with pytest.raises(RetestWaits):  # the wipe comes first; the task looks again later
        card_retest_run(retest_id=retest.pk)
    from provisioning.services.cleaning import node_clean

    node_clean(node=node)
    node.refresh_from_db()
    assert node.state == "available"
    assert card_retest_run(retest_id=retest.pk) == "passed"
    assert _healths(node) == ["ok"] * 8
    assert Instance.objects.get(pk=iid).state == "terminated"
