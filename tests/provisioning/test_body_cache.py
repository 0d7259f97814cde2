"""The instance list's kept bodies (provisioning/body_cache.py): what a warm list shows is byte for byte what a cold
one builds, every change to what a body shows clears it in the writer's transaction (migration 0016's triggers),
a body built from an older snapshot is never written back, and a write-back never waits for a writer."""
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.dbclock import db_now
from core.renderers import json_text
from inventory.models import Accelerator, Node, Zone
from provisioning import body_cache
from provisioning.api.rows import RowFigures, figure_fields
from provisioning.models import Instance, InstanceBody, NodeGroup
from provisioning.selectors import INSTANCE_BODY_COLUMNS, _BodyRows
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory, make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/?limit=100"


def _group(inst, node, cards, state="checked", **kw):
    return NodeGroup.objects.create(instance=inst, item_index=0, accelerator=node.accelerator.slug, node=node,
                                    card_indices=cards, card_ids=[], state=state, **kw)


@pytest.fixture
def running(owner):
    node, = make_fleet(h100=1)
    inst = InstanceFactory(organization=owner.organization, state="running", name="kept", zone=node.zone,
                           ready_at=db_now(), sla_deadline=db_now() + timedelta(minutes=15))
    _group(inst, node, [0, 1], ssh_port=30000)
    MeterFactory(organization=owner.organization, instance_id=inst.pk, posted_amount=1_234_567)
    return inst


def _kept(inst) -> InstanceBody:
    return InstanceBody.objects.get(instance_id=inst.pk)


def _row(client, inst) -> dict:
    return next(r for r in client.get(URL).json()["results"] if r["id"] == str(inst.pk))


def test_a_warm_list_is_the_cold_list_byte_for_byte(client, owner, running, settings):
    settings.SLURM_SCONTROL = "scontrol"  # a hybrid shows its partition
    h1, asc = make_fleet(zone="zone-b", h100=1, ascend=1)
    hybrid = InstanceFactory(organization=owner.organization, state="running", kind="bare_metal", image="",
                             items=[{"accelerator": "h100-sxm-80g", "count": 8, "rate": 1},
                                    {"accelerator": "ascend-910b", "count": 8, "rate": 2}],
                             images={"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}, ready_at=db_now())
    _group(hybrid, h1, list(range(8)))
    NodeGroup.objects.create(instance=hybrid, item_index=1, accelerator="ascend-910b", node=asc,
                             card_indices=list(range(8)), card_ids=[], state="checked")
    InstanceFactory(organization=owner.organization, state="waitlisted", waitlist=True, waitlisted_at=db_now(),
                    name="waiting\u2028line")  # a name the renderer escapes
    InstanceFactory(organization=owner.organization, state="stopped", state_reason="stopped by user")
    cold = client.get(URL)
    assert InstanceBody.objects.filter(instance__organization=owner.organization, body__isnull=False).count() == 4
    warm = client.get(URL)
    assert cold.status_code == warm.status_code == 200
    assert warm.content == cold.content
    assert b"\\u2028" in warm.content and "\u2028".encode() not in warm.content
    # And ?indent (DRF's own encoder) reads the kept bodies as documents.
    indented = client.get(URL, HTTP_ACCEPT="application/json; indent=2")
    assert indented.json() == warm.json() and b"\n  " in indented.content


def test_the_per_row_figures_are_read_fresh_under_a_kept_body(client, owner, running):
    assert _row(client, running)["cost_so_far"] == "1.234567"
    assert _kept(running).body is not None
    MeterFactory(organization=owner.organization, instance_id=running.pk, item_index=1, posted_amount=1)
    row = _row(client, running)
    assert row["cost_so_far"] == "1.234568"
    assert _kept(running).body is not None  # a meter is not part of the kept body
    assert row == client.get(f"/api/v1/instances/{running.pk}/").json()


def _changes():
    """Each a change to something the body shows, made as a writer would, and what the list must show after."""
    def rename(inst):
        Instance.objects.filter(pk=inst.pk).update(name="renamed")
        return lambda row: row["name"] == "renamed"

    def stop(inst):
        Instance.objects.filter(pk=inst.pk).update(state="stopped")
        return lambda row: row["state"] == "stopped" and "start" in row["actions"]

    def release(inst):
        NodeGroup.objects.filter(instance=inst).update(released_at=db_now())
        return lambda row: row["nodes"] == [] and row["ssh"] == []

    def add_group(inst):
        node = Node.objects.get(pk=inst.groups.first().node_id)
        _group(inst, node, [2, 3], ssh_port=30002)
        return lambda row: [n["cards"] for n in row["nodes"]] == [[0, 1], [2, 3]]

    def delete_group(inst):
        NodeGroup.objects.filter(instance=inst).delete()
        return lambda row: row["nodes"] == []

    def node_address(inst):
        Node.objects.filter(pk=inst.groups.first().node_id).update(ssh_host="10.9.8.7")
        return lambda row: row["ssh"][0]["host"] == "10.9.8.7"

    def zone_slug(inst):
        Zone.objects.filter(pk=inst.zone_id).update(slug="zone-renamed")
        return lambda row: row["zone"] == "zone-renamed"

    def vendor(inst):
        Accelerator.objects.filter(slug="h100-sxm-80g").update(vendor="huawei")
        return None  # nothing in a one-vendor body shows it; the row is cleared all the same

    return [rename, stop, release, add_group, delete_group, node_address, zone_slug, vendor]


@pytest.mark.parametrize("change", _changes(), ids=lambda f: f.__name__)
def test_a_change_to_what_the_body_shows_clears_it(client, running, change):
    _row(client, running)
    before = _kept(running)
    assert before.body is not None
    shows = change(running)
    after = _kept(running)
    assert after.body is None and after.version > before.version
    row = _row(client, running)
    if shows is not None:
        assert shows(row), row
    assert row == client.get(f"/api/v1/instances/{running.pk}/").json()
    assert _kept(running).body is not None  # built again, for the next read


def test_a_change_to_nothing_the_body_shows_keeps_it(client, running):
    _row(client, running)
    before = _kept(running)
    Instance.objects.filter(pk=running.pk).update(step_retries=3, expires_at=db_now())
    NodeGroup.objects.filter(instance=running).update(check_attempts=2, prepare_output="ok")
    Node.objects.filter(pk=running.groups.first().node_id).update(state="draining")
    after = _kept(running)
    assert (after.version, after.body) == (before.version, before.body)


def test_a_body_on_its_way_to_running_is_not_kept(client, owner):
    node, = make_fleet(h100=1)
    late = InstanceFactory(organization=owner.organization, state="provisioning",
                           sla_deadline=db_now() + timedelta(seconds=2))
    _group(late, node, [0, 1], state="placed")
    assert _row(client, late)["sla"]["breached"] is False
    assert _kept(late).body is None  # its breach turns on the clock
    Instance.objects.filter(pk=late.pk).update(sla_deadline=db_now() - timedelta(seconds=1))
    assert _row(client, late)["sla"]["breached"] is True


def _text(name: str) -> str:
    """A kept text as the list writes it, of a body with just an id and the per-row figures."""
    return body_cache.kept_text({"id": name, **{figure: None for figure in body_cache.FIGURES}})


def test_a_body_built_from_an_older_snapshot_is_not_written_back(owner, running):
    rows = _BodyRows(org_id=owner.organization_id, states=[]).page(0, 10)
    version = rows[0][INSTANCE_BODY_COLUMNS.index("body_version")]
    Instance.objects.filter(pk=running.pk).update(name="changed meanwhile")  # a writer after the read
    body_cache.keep([(str(running.pk), version, _text("old"))])
    assert _kept(running).body is None
    body_cache.keep([(str(running.pk), _kept(running).version, _text("x"))])
    assert _kept(running).body == _text("x")


def test_another_format_is_built_again(client, running, settings):
    first = _row(client, running)
    assert first["ssh_gateway"] is not None
    settings.SSH_GATEWAY_PUBLIC_HOST = "gw.elsewhere.test"
    row = _row(client, running)
    assert row["ssh_gateway"]["host"] == "gw.elsewhere.test"
    assert _kept(running).format == body_cache.body_format()


def test_the_plain_figures_shortcut_is_the_figures_json():
    for cost, position in ((0, None), (1_234_567, 3), (-5, None), (10**12, 1)):
        fields = figure_fields(RowFigures(cost, position, None, [], {}))
        assert (json_text(fields[1]), json_text(fields[2])) == body_cache.plain_figures(cost, position)
        assert [json_text(v) for v in (fields[0], *fields[3:])] == ["null", "[]", "[]", "[]"]


def test_the_plain_splice_is_the_general_one():
    kept = body_cache.body_cut(body_cache.kept_text({"id": "x", **{f: None for f in body_cache.FIGURES},
                                                     "name": "after"}))
    for cost, position in ((0, None), (None, None), (1_234_567, 3), (-5, None), (-1_000_001, 2), (10**12, 1)):
        figures = (None, *body_cache.plain_figures(cost, position), None, None, None)
        assert body_cache.plain_body_text(kept, cost, position) == body_cache.body_text(kept, figures)


def test_a_warm_page_reads_no_kept_text_from_the_database(client, owner, running):
    InstanceFactory(organization=owner.organization, state="stopped")
    cold = client.get(URL)
    with CaptureQueriesContext(connection) as ctx:
        warm = client.get(URL)
    assert warm.content == cold.content
    texts_read = [q for q in ctx.captured_queries if "xmin::text, body FROM" in (q["sql"] or "")]
    assert texts_read == []
    body_cache._texts.clear()  # another process, or this one after its texts were dropped
    with CaptureQueriesContext(connection) as ctx:
        again = client.get(URL)
    assert again.content == cold.content
    assert sum("xmin::text, body FROM" in (q["sql"] or "") for q in ctx.captured_queries) == 1


def test_a_body_written_again_at_the_same_version_is_not_served_from_memory(client, owner, running):
    before = _row(client, running)
    kept = _kept(running)
    # Another process's write-back at the same version (its format, e.g. a deploy's): same version, new text.
    InstanceBody.objects.filter(pk=running.pk).update(body=body_cache.kept_text({**before, "name": "kept elsewhere"}))
    assert _kept(running).version == kept.version
    after = _row(client, running)
    assert after == {**before, "name": "kept elsewhere"}


def test_a_body_changed_between_the_page_and_its_texts_is_read_again(client, owner, running, monkeypatch):
    _row(client, running)
    body_cache._texts.clear()
    real = body_cache.kept_texts

    def a_writer_first(keys):  # a writer commits between the page's statement and the texts' query
        Instance.objects.filter(pk=running.pk).update(name="renamed meanwhile")
        return real(keys)

    monkeypatch.setattr(body_cache, "kept_texts", a_writer_first)
    reads = []
    statement = _BodyRows._statement
    monkeypatch.setattr(_BodyRows, "_statement", lambda self, **kw: reads.append(kw) or statement(self, **kw))
    row = _row(client, running)
    assert row["name"] == "renamed meanwhile"  # the page read again: its body built from the new row
    assert [kw["kept_texts"] for kw in reads] == [False, True]


def test_the_process_holds_at_most_texts_held(client, owner, running, monkeypatch):
    for n in range(3):
        InstanceFactory(organization=owner.organization, state="stopped", name=f"s{n}")
    monkeypatch.setattr(body_cache, "TEXTS_HELD", 2)
    body_cache._texts.clear()
    cold = client.get(URL)
    assert len(body_cache._texts) == 2
    assert client.get(URL).content == cold.content
    assert len(body_cache._texts) == 2


@pytest.mark.django_db(transaction=True)
def test_a_write_back_skips_a_body_a_writer_holds(owner, running, caplog):
    version = _kept(running).version
    settings = connection.settings_dict
    held, release = threading.Event(), threading.Event()

    def writer():
        with psycopg.connect(dbname=settings["NAME"], host=settings["HOST"], port=settings["PORT"] or 5432,
                             user=settings["USER"], autocommit=False) as other:
            other.execute("SELECT 1 FROM provisioning_instancebody WHERE instance_id = %s FOR UPDATE", [running.pk])
            held.set()
            release.wait(10)
            other.rollback()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert held.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a write-back that waited would fail, and say so
        body_cache.keep([(str(running.pk), version, _text("x"))])
        assert _kept(running).body is None  # skipped, not waited for
        assert "instance bodies not kept" not in caplog.text
    finally:
        release.set()
        thread.join()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    body_cache.keep([(str(running.pk), version, _text("x"))])
    assert _kept(running).body == _text("x")
