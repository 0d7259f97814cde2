"""Node lifecycle, CSV import, card allocation (with real concurrency) and capacity events."""
import threading
import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from core.errors import InvalidState, ValidationFailed
from inventory import selectors, services
from inventory.choices import CardHealth, NodeState
from inventory.models import Card, CardAllocation, Node
from tenancy.models import AuditEvent
from tests.factories.inventory import CardAllocationFactory, NodeFactory, ZoneFactory, accelerator
from tests.factories.tenancy import UserFactory


@pytest.mark.django_db(transaction=True)
def test_node_state_actions_are_audited_and_undrain_announces_capacity(capacity_events):
    operator = UserFactory(is_staff=True)
    node = NodeFactory()
    services.node_set_state(node=node, state="drain", reason="firmware upgrade", actor=operator)
    assert node.state == NodeState.DRAINING and node.state_reason == "firmware upgrade"
    assert capacity_events == []  # draining frees nothing
    services.node_set_state(node=node, state="undrain", reason="upgrade done", actor=operator)
    assert Node.objects.get(pk=node.pk).state == NodeState.AVAILABLE
    assert capacity_events == [{"accelerator_ids": [str(node.accelerator_id)], "zone_ids": [str(node.zone_id)]}]
    events = list(AuditEvent.objects.filter(target_id=str(node.pk)).order_by("created_at", "pk")
                  .values_list("action", "actor_id", "details"))
    assert [(a, actor) for a, actor, _ in events] == [("node.draining", operator.pk), ("node.available", operator.pk)]
    assert events[0][2] == {"from": "available", "to": "draining", "reason": "firmware upgrade",
                            "hostname": node.hostname}


@pytest.mark.django_db
def test_retire_refused_while_cards_are_allocated_and_reason_required():
    node = NodeFactory()
    alloc = CardAllocationFactory(card=node.cards.get(index=0))
    with pytest.raises(InvalidState) as err:
        services.node_set_state(node=node, state="retire", reason="end of life")
    assert err.value.status == 409 and err.value.code == "invalid_state"
    assert Node.objects.get(pk=node.pk).state == NodeState.AVAILABLE
    with pytest.raises(ValidationFailed) as err:
        services.node_set_state(node=node, state="quarantine", reason="  ")
    assert err.value.details == {"reason": ["This field is required."]}
    with pytest.raises(ValidationFailed):
        services.node_set_state(node=node, state="exploded", reason="x")
    services.cards_release(holder_id=alloc.holder_id)
    services.node_set_state(node=node, state="retire", reason="end of life")
    assert Node.objects.get(pk=node.pk).state == NodeState.RETIRED
    with pytest.raises(InvalidState):
        services.node_set_state(node=node, state="undrain", reason="oops")


@pytest.mark.django_db(transaction=True)
def test_node_create_makes_cards_and_announces(capacity_events):
    zone, h800 = ZoneFactory(), accelerator("h800-sxm-80g")
    node = services.node_create(hostname="new-01.test", zone=zone, accelerator=h800, card_count=4)
    assert sorted(node.cards.values_list("index", flat=True)) == [0, 1, 2, 3]
    assert capacity_events == [{"accelerator_ids": [str(h800.pk)], "zone_ids": [str(zone.pk)]}]
    assert AuditEvent.objects.filter(action="node.create", target_id=str(node.pk)).exists()
    with pytest.raises(ValidationFailed) as err:
        services.node_create(hostname="new-01.test", zone=zone, accelerator=h800, card_count=0)
    assert set(err.value.details) == {"hostname", "card_count"}


CSV_GOOD = """hostname,zone,accelerator,card_count,driver,ssh_port,bmc_credentials_ref
csv-01.test,z1,h100-sxm-80g,8,simulated,22,bmc-csv-01
csv-02.test,z1,ascend-910b,,redfish,,
"""


@pytest.mark.django_db
def test_csv_import_is_all_or_nothing_and_names_row_and_field():
    from tests.factories.hardware import bmc_credential

    ZoneFactory(slug="z1")
    bmc_credential(name="bmc-csv-01")
    bad = CSV_GOOD + "csv-03.test,z1,h200-nope,8,simulated,22,\ncsv-04.test,z1,a800-sxm-80g,eight,simulated,22,\n"
    with pytest.raises(ValidationFailed) as err:
        services.nodes_import_csv(file=bad.encode(), actor=None)
    assert err.value.details == {"row 4: accelerator": ["Unknown accelerator 'h200-nope'."],
                                 "row 5: card_count": ["Enter a whole number."]}
    assert "row 4: accelerator" in err.value.message
    assert not Node.objects.filter(hostname__startswith="csv-").exists()
    assert not Card.objects.exists()

    dup = CSV_GOOD + "CSV-01.test,z1,h100-sxm-80g,8,simulated,22,\n"
    with pytest.raises(ValidationFailed) as err:
        services.nodes_import_csv(file=dup, actor=None)
    assert list(err.value.details) == ["row 4: hostname"]
    with pytest.raises(ValidationFailed) as err:
        services.nodes_import_csv(file="host,zone\n", actor=None)
    assert err.value.details["header"] == ["Missing column hostname.", "Missing column accelerator.",
                                           "Unknown column host."]

    nodes = services.nodes_import_csv(file=CSV_GOOD.encode("utf-8-sig"), actor=None)
    assert [(n.hostname, n.accelerator.slug, n.card_count, n.driver) for n in nodes] == [
        ("csv-01.test", "h100-sxm-80g", 8, "simulated"), ("csv-02.test", "ascend-910b", 8, "redfish")]
    assert Card.objects.filter(node__hostname__startswith="csv-").count() == 16
    assert AuditEvent.objects.filter(action="nodes.import_csv").get().details["count"] == 2
    with pytest.raises(ValidationFailed) as err:  # the same file again: every hostname now exists
        services.nodes_import_csv(file=CSV_GOOD, actor=None)
    assert set(err.value.details) == {"row 2: hostname", "row 3: hostname"}


@pytest.mark.django_db(transaction=True)
def test_allocate_and_release_cards(capacity_events):
    node = NodeFactory()
    ids = list(node.cards.order_by("pk").values_list("pk", flat=True))
    holder = uuid.uuid4()
    allocs = services.cards_allocate(card_ids=ids[:4], holder_id=holder)
    assert [a.card_id for a in allocs] == ids[:4]
    assert selectors.stock_by_accelerator()["h100-sxm-80g"]["available_cards"] == 4
    with pytest.raises(services.CardsUnavailable) as err:
        services.cards_allocate(card_ids=ids[3:6], holder_id=uuid.uuid4())
    assert err.value.card_ids == [ids[3]] and err.value.code == "insufficient_capacity"
    Card.objects.filter(pk=ids[6]).update(health=CardHealth.FAILED)
    with pytest.raises(services.CardsUnavailable) as err:
        services.cards_allocate(card_ids=[ids[6], ids[7]], holder_id=uuid.uuid4())
    assert err.value.card_ids == [ids[6]]
    assert [a.card_id for a in selectors.allocations_live(holder_id=holder)] == ids[:4]
    assert services.cards_release(holder_id=holder, card_ids=ids[:1]) == 1
    assert services.cards_release(holder_id=holder) == 3
    assert services.cards_release(holder_id=holder) == 0  # idempotent
    assert len(capacity_events) == 2
    assert CardAllocation.objects.filter(holder_id=holder, released_at__isnull=False).count() == 4
    services.node_set_state(node=node, state="drain", reason="test")
    with pytest.raises(services.CardsUnavailable):
        services.cards_allocate(card_ids=ids[:1], holder_id=uuid.uuid4())


def _race(target_a, target_b):
    """Run two functions in two threads (two database connections); return their results/exceptions."""
    results: dict = {}

    def run(name, fn):
        try:
            results[name] = fn()
        except Exception as exc:  # noqa: BLE001 — the test inspects what each side got
            results[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=("a", target_a)), threading.Thread(target=run, args=("b", target_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_inserts_for_one_card_one_fails_on_the_constraint():
    card = NodeFactory().cards.get(index=0)
    a_inserted, b_started = threading.Event(), threading.Event()

    def insert_a():
        with transaction.atomic():
            CardAllocation.objects.create(card_id=card.pk, holder_id=uuid.uuid4())
            a_inserted.set()
            b_started.wait(10)
            # Let B's insert reach the unique index and block on our uncommitted row.
            threading.Event().wait(0.5)
        return "committed"

    def insert_b():
        a_inserted.wait(10)
        b_started.set()
        with transaction.atomic():
            CardAllocation.objects.create(card_id=card.pk, holder_id=uuid.uuid4())
        return "committed"

    results = _race(insert_a, insert_b)
    assert results["a"] == "committed"
    assert isinstance(results["b"], IntegrityError)
    assert "card_one_live_allocation" in str(results["b"])
    assert CardAllocation.objects.filter(card=card, released_at__isnull=True).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_cards_allocate_never_hands_out_a_card_twice():
    node = NodeFactory()
    ids = list(node.cards.order_by("pk").values_list("pk", flat=True))
    barrier = threading.Barrier(2)

    def grab(card_ids):
        def go():
            barrier.wait(10)
            return services.cards_allocate(card_ids=card_ids, holder_id=uuid.uuid4())
        return go

    # Overlapping requests in opposite orders: locks in pk order mean no deadlock, one loses.
    results = _race(grab(ids[:5]), grab(list(reversed(ids[3:8]))))
    outcomes = sorted(type(r).__name__ for r in results.values())
    assert outcomes == ["CardsUnavailable", "list"]
    live = CardAllocation.objects.filter(released_at__isnull=True)
    assert live.count() == 5 and live.values("card").distinct().count() == 5


@pytest.mark.django_db(transaction=True)  # capacity is announced on commit
def test_card_health_is_an_audited_operator_finding_and_healthy_again_announces_capacity(capacity_events):
    operator = UserFactory(is_staff=True)
    node = NodeFactory(card_count=4)
    cards = list(node.cards.order_by("index"))
    held = CardAllocationFactory(card=cards[1])
    assert services.cards_set_health(card_ids=[cards[0].pk, cards[1].pk], health="failed", reason="XID 79",
                                     actor=operator) == 2
    assert services.cards_set_health(card_ids=[cards[0].pk], health="failed", reason="again") == 0  # no change
    # Never placed while failed; the held card stays with its holder until released.
    (snapshot,) = [n for n in selectors.placement_snapshot() if n["id"] == node.pk]
    assert snapshot["free"] == frozenset({2, 3})
    assert CardAllocation.objects.get(pk=held.pk).released_at is None
    with pytest.raises(services.CardsUnavailable):
        services.cards_allocate(card_ids=[cards[0].pk], holder_id=uuid.uuid4())
    assert capacity_events == []
    audit = AuditEvent.objects.filter(action="card.health").order_by("pk")
    assert [(e.actor_id, e.details["to"], e.details["reason"]) for e in audit] == [
        (operator.pk, "failed", "XID 79"), (operator.pk, "failed", "XID 79")]

    assert services.cards_set_health(card_ids=[cards[0].pk], health="ok", reason="reseated", actor=operator) == 1
    assert Card.objects.get(pk=cards[0].pk).health == CardHealth.OK
    assert capacity_events == [{"accelerator_ids": [str(node.accelerator_id)], "zone_ids": [str(node.zone_id)]}]
    with pytest.raises(ValidationFailed):
        services.cards_set_health(card_ids=[cards[2].pk], health="melted", reason="x")
    with pytest.raises(ValidationFailed):
        services.cards_set_health(card_ids=[cards[2].pk], health="failed", reason=" ")
    assert Card.objects.get(pk=cards[2].pk).health == CardHealth.OK
