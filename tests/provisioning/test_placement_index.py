"""The per-process placement index: every committed change reaches it, rolled-back ones do not stay in it,
commits landing out of order are all seen, a pruned or truncated log makes it rebuild, and claims racing
over it never hold a card twice."""
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from inventory.choices import CardHealth, NodeState
from inventory.models import Card, CardAllocation, Node, PlacementChange
from inventory.services import cards_allocate, cards_release, placement_changes_prune
from provisioning.models import NodeGroup
from provisioning.placement import CONTAINER, Item, PlacementRequest
from provisioning.services.capacity import free_snapshot, placement_catalog
from provisioning.services.claims import placement_claim, placement_decide
from provisioning.services.placement_index import placement_fleet
from tests.factories.inventory import NodeFactory, accelerator
from tests.factories.provisioning import InstanceFactory, make_fleet
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]
H100 = "h100-sxm-80g"


def _request(count: int) -> PlacementRequest:
    return PlacementRequest(CONTAINER, (Item(H100, count),))


def _index_view() -> dict:
    """What the index holds now (after its refresh), as node id -> (state, free cards)."""
    with placement_fleet() as fleet:
        return {n.id: (n.state, n.free) for n in fleet.snapshot() if n.accelerator == H100}


def _database_view() -> dict:
    return {n.id: (n.state, n.free) for n in free_snapshot(accelerators=[H100])}


def _cards(node, *indices) -> list[int]:
    return list(Card.objects.filter(node=node, index__in=indices).values_list("pk", flat=True))


def test_every_kind_of_change_reaches_the_index():
    a, b = make_fleet(h100=2)
    catalog = placement_catalog()
    assert placement_decide(_request(8), catalog).ok  # builds the index
    holder = InstanceFactory().pk
    cards_allocate(card_ids=_cards(a, *range(8)), holder_id=holder)
    assert _index_view() == _database_view()
    assert [x.node_id for x in placement_decide(_request(8), catalog).assignments] == [str(b.pk)]
    cards_release(holder_id=holder)
    Card.objects.filter(node=b, index=0).update(health=CardHealth.FAILED)
    assert _index_view() == _database_view()
    assert [x.node_id for x in placement_decide(_request(8), catalog).assignments] == [str(a.pk)]
    Node.objects.filter(pk=a.pk).update(state=NodeState.DRAINING)
    assert not placement_decide(_request(8), catalog).ok  # b has 7 healthy cards, a takes nothing new
    c = NodeFactory(zone=a.zone, accelerator=accelerator(H100), hostname="late.test")
    assert [x.node_id for x in placement_decide(_request(8), catalog).assignments] == [str(c.pk)]
    Node.objects.filter(pk=c.pk).update(state=NodeState.RETIRED)
    Card.objects.filter(node=b).delete()
    assert _index_view() == _database_view()
    assert str(c.pk) not in _index_view() and _index_view()[str(b.pk)] == (NodeState.AVAILABLE, frozenset())
    assert not placement_decide(_request(1), catalog).ok


def test_a_rolled_back_allocation_does_not_stay_in_the_index():
    (node,) = make_fleet(h100=1)
    catalog = placement_catalog()
    assert placement_decide(_request(8), catalog).ok
    with pytest.raises(RuntimeError), transaction.atomic():
        cards_allocate(card_ids=_cards(node, *range(8)), holder_id=InstanceFactory().pk)
        assert not placement_decide(_request(1), catalog).ok  # this transaction sees its own allocation
        raise RuntimeError("roll back")
    assert _index_view() == _database_view()
    assert placement_decide(_request(8), catalog).ok


def test_changes_committed_out_of_order_are_all_seen():
    a, b = make_fleet(h100=2)
    holder_a, holder_b = InstanceFactory().pk, InstanceFactory().pk
    assert _index_view() == _database_view()  # built: both writers below come after its read
    taken, commit = threading.Event(), threading.Event()

    def slow():  # the older transaction: allocates first, commits last
        with transaction.atomic():
            cards_allocate(card_ids=_cards(a, 0, 1), holder_id=holder_a)
            taken.set()
            assert commit.wait(10)

    older = Aside(slow)
    assert taken.wait(10)
    cards_allocate(card_ids=_cards(b, 0), holder_id=holder_b)  # younger, committed first
    assert _index_view() == _database_view()
    assert _index_view()[str(a.pk)][1] == frozenset(range(8))  # the older one is not committed yet
    commit.set()
    older.result()
    assert _index_view() == _database_view()
    assert _index_view()[str(a.pk)][1] == frozenset(range(2, 8))


def test_a_write_after_a_decision_in_the_same_transaction_is_seen_after_its_commit():
    a, b = make_fleet(h100=2)
    assert _index_view() == _database_view()
    with transaction.atomic():
        cards_allocate(card_ids=_cards(a, 0), holder_id=InstanceFactory().pk)  # this transaction has an id now
        # Another transaction finishing after it: this snapshot's xmin is now above this transaction's id.
        Aside(lambda: cards_allocate(card_ids=_cards(b, 0), holder_id=InstanceFactory().pk)).result()
        assert _index_view() == _database_view()
        cards_allocate(card_ids=_cards(b, 1, 2), holder_id=InstanceFactory().pk)  # after the decision
    assert _index_view() == _database_view()
    assert _index_view()[str(b.pk)][1] == frozenset(range(3, 8))


def test_a_pruned_log_makes_a_stale_index_rebuild():
    (node,) = make_fleet(h100=1)
    assert _index_view() == _database_view()
    cards_allocate(card_ids=_cards(node, 0, 1, 2), holder_id=InstanceFactory().pk)  # not yet read by the index
    PlacementChange.objects.update(created_at=PlacementChange.objects.order_by("id").first().created_at
                                   - timedelta(hours=1))
    assert placement_changes_prune(older_than=timedelta(minutes=10)) > 0
    assert not PlacementChange.objects.filter(node_id=node.pk).exists()  # the change rows are gone
    assert _index_view() == _database_view()
    assert _index_view()[str(node.pk)][1] == frozenset(range(3, 8))


def test_a_truncated_fleet_makes_the_index_rebuild():
    (node,) = make_fleet(h100=1)
    assert _index_view() == _database_view()
    with connection.cursor() as cursor:  # as a transactional test's flush does
        cursor.execute("TRUNCATE inventory_cardallocation, inventory_card, inventory_node CASCADE")
    assert _index_view() == {} == _database_view()
    assert str(node.pk) not in _index_view()


def test_racing_claims_over_the_shared_index_never_hold_a_card_twice():
    make_fleet(h100=2)  # 16 cards
    catalog = placement_catalog()
    # 16 cards asked in halves of a node: all fit whatever the order, and each loser of a race loses to a
    # committed winner, so 4 claims need at most 4 of placement_claim's 5 attempts.
    sizes = [4, 4, 4, 4]
    instances = [InstanceFactory() for _ in sizes]
    start = threading.Barrier(len(sizes))

    def claim(instance, size):
        start.wait(10)
        with transaction.atomic():
            return placement_claim(instance=instance, request=_request(size), catalog=catalog).ok

    sides = [Aside(lambda i=i, s=s: claim(i, s)) for i, s in zip(instances, sizes, strict=True)]
    results = [side.result(60) for side in sides]
    live = list(CardAllocation.objects.live().values_list("card_id", flat=True))
    assert len(live) == len(set(live))
    held = [(g.node_id, c) for g in NodeGroup.objects.live() for c in g.card_indices]
    assert len(held) == len(set(held)) == len(live)
    assert sum(s for s, ok in zip(sizes, results, strict=True) if ok) == len(live)
    assert all(results), results  # every request fits: a stale view may cost retries, never a refusal
    assert _index_view() == _database_view()


def test_a_decision_cut_short_leaves_no_half_searched_index(monkeypatch):
    (node,) = make_fleet(h100=1)
    catalog = placement_catalog()
    assert placement_decide(_request(8), catalog).ok
    from provisioning.placement import fleet as engine

    def taken_then_crash(self, plan_fn):  # takes cards as a search does, then fails before giving them back
        self.index.take(self.index.ordinal[str(node.pk)], 4)
        raise RuntimeError("engine bug")

    monkeypatch.setattr(engine.Fleet, "_tentative", taken_then_crash)
    with pytest.raises(RuntimeError):
        placement_decide(_request(1), catalog)
    monkeypatch.undo()
    assert _index_view() == _database_view()
    assert placement_decide(_request(8), catalog).ok


def test_the_marker_check_reads_an_index_not_the_whole_log():
    """Every decision asks whether a marker (a row with a horizon) is new; markers are rare, so with the log's
    statistics as autovacuum keeps them that question is answered from the partial index, not a scan of the log
    (0.8 ms at 10k rows before the index, growing until the prune)."""
    from django.db.models import Max

    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO inventory_placementchange (node_id, xid, created_at) "
                       "SELECT gen_random_uuid(), 1000 + i, now() FROM generate_series(1, 20000) AS i")
        cursor.execute("ANALYZE inventory_placementchange")
        last = PlacementChange.objects.aggregate(m=Max("id"))["m"] - 5
        cursor.execute("EXPLAIN SELECT EXISTS(SELECT 1 FROM inventory_placementchange WHERE (id > %s OR xid = ANY(%s))"
                       " AND horizon IS NOT NULL AND (horizon > %s OR horizon_xid >= ANY(%s)))",
                       [last, [7, 8], last, [7, 8]])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "placement_change_marker" in plan and "Seq Scan" not in plan, plan


def test_the_change_read_scans_no_table_even_without_statistics():
    """The read runs on every decision and is meant to cost what changed: by index, whatever the planner knows. With
    the log analyzed empty and then filled (a bulk load before autovacuum came round) it scanned the whole log
    for the marker check (3.4 ms at 43k rows, bench.scale's database); the function runs with sequential scans off
    (inventory 0014)."""
    from inventory.selectors import placement_changes, placement_mark

    make_fleet(h100=2)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM inventory_placementchange")
        cursor.execute("ANALYZE inventory_placementchange")  # analyzed empty: no statistics at all
        cursor.execute("INSERT INTO inventory_placementchange (node_id, xid, created_at) "
                       "SELECT gen_random_uuid(), 1000 + i, now() FROM generate_series(1, 20000) AS i")
    mark = placement_mark()
    node = Node.objects.first()
    def scans() -> int:  # sequential scans of the log in this transaction so far
        with connection.cursor() as cursor:
            cursor.execute("SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables "
                           "WHERE relname = 'inventory_placementchange'")
            return cursor.fetchone()[0]

    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(state=NodeState.DRAINING)  # a change to read
        before = scans()
        for _ in range(8):  # past the plan cache's first five custom plans
            changes = placement_changes(since=mark)
        after = scans()
    assert str(node.pk) in changes.node_ids
    assert after == before
    with connection.cursor() as cursor:  # what guarantees it whatever the statistics say
        cursor.execute("SELECT proconfig FROM pg_proc WHERE proname = 'inventory_placement_changes'")
        assert sorted(cursor.fetchone()[0]) == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]
