"""The instance list reads a page and its per-row figures in one statement, its waitlist positions in one more
(selectors.instance_list_rows, waitlist_positions); the detail builds the same body query by query
(InstanceSerializer). Both must agree for what the golden file does not hold: notices (a silent node, open card
incidents), volumes, datasets, waitlist positions across shapes — by offset and by cursor pages — and the query
count must not grow with the page, the organization or the platform's waitlist, in either form."""
from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from tests.factories.provisioning import InstanceFactory, make_fleet
from tests.provisioning.list_reads import list_queries

pytestmark = pytest.mark.django_db

URL = "/api/v1/instances/"


def _group(inst, node, cards):
    from provisioning.models import NodeGroup

    NodeGroup.objects.create(instance=inst, item_index=0, accelerator="h100-sxm-80g", node=node,
                             card_indices=cards, card_ids=[])


def _mixed(owner):
    """Instances with every kind of per-row figure; returns them."""
    from core.dbclock import db_now
    from hardware.models import NodeCredential
    from hardware.services import UNREACHABLE_REASON
    from inventory.models import Card
    from provisioning.models import HealthIncident
    from storage.models import DatasetMount, VolumeAttachment
    from tests.factories.storage import DatasetFactory, make_volume

    org, now = owner.organization, db_now()
    dark_node, sick_node = make_fleet(h100=2)
    made = []
    silent = InstanceFactory(organization=org, state="running", name="silent")
    _group(silent, dark_node, [0, 1])
    dark_node.state, dark_node.state_reason = "unreachable", f"{UNREACHABLE_REASON} (test)"
    dark_node.save(update_fields=["state", "state_reason"])
    NodeCredential.objects.create(node=dark_node, prefix="test", last_heartbeat_at=now - timedelta(minutes=3))
    made.append(silent)
    sick = InstanceFactory(organization=org, state="running", name="sick", kind="bare_metal")
    _group(sick, sick_node, [0, 1, 2])
    for index, failed in ((2, now - timedelta(minutes=1)), (0, None)):
        card = Card.objects.get(node=sick_node, index=index)
        HealthIncident.objects.create(instance=sick, card=card, item_index=0, klass="failed" if failed else "degraded",
                                      detail=f"signal {index}", started_at=now - timedelta(minutes=5 - index),
                                      failed_at=failed)
    made.append(sick)
    stored = InstanceFactory(organization=org, state="stopped", name="stored")
    zone = dark_node.zone
    for i, path in enumerate(("/data", "/cache")):
        volume = make_volume(org, zone, name=f"vol-{i}")
        VolumeAttachment.objects.create(volume=volume, instance_id=stored.pk, mount_path=path)
    for slug in ("weights-b", "weights-a"):
        DatasetMount.objects.create(dataset=DatasetFactory(slug=slug), organization=org, instance_id=stored.pk)
    made.append(stored)
    # Waitlisted in two shapes (items, and a policy), interleaved, plus another organization's ahead of them.
    other = InstanceFactory(state="waitlisted", waitlist=True, waitlisted_at=now - timedelta(hours=2),
                            items=[{"accelerator": "h100-sxm-80g", "count": 1, "rate": 1}])
    assert other.organization_id != org.pk
    for i in range(6):
        if i % 2:
            spec = {"items": [], "kind": "bare_metal",
                    "policy": {"total_cards": 8, "compatible_vendors": ["nvidia", "huawei"], "min_domestic_share": 0}}
        else:
            spec = {"items": [{"accelerator": "h100-sxm-80g", "count": 1, "rate": 1_900_000}]}
        made.append(InstanceFactory(organization=org, state="waitlisted", waitlist=True, name=f"wait-{i}",
                                    waitlisted_at=now - timedelta(minutes=60 - i), **spec))
    return made


def _path(link):
    parts = urlsplit(link)
    return f"{parts.path}?{parts.query}"


def _listed(client, url):
    rows, pages = [], 0
    while url:
        body = client.get(url).json()
        rows += body["results"]
        pages += 1
        url = _path(body["next"]) if body["next"] else None
    return rows, pages


def test_list_figures_match_the_detail_by_offset_and_by_cursor(client, owner):
    made = _mixed(owner)
    by_offset, pages = _listed(client, f"{URL}?limit=3")
    by_cursor, cursor_pages = _listed(client, f"{URL}?limit=3&cursor=")
    assert pages == cursor_pages == 3 and len(by_offset) == len(made) == 9
    assert by_cursor == by_offset
    detail = {i.pk: client.get(f"{URL}{i.pk}/").json() for i in made}
    for row in by_offset:
        assert row == detail[__import__("uuid").UUID(row["id"])], row["name"]
    named = {r["name"]: r for r in by_offset}
    assert [n["code"] for n in named["silent"]["notices"]] == ["node_unreachable"]
    assert [(n["code"], n["card"]) for n in named["sick"]["notices"]] == [("card_degraded", 0), ("card_failed", 2)]
    assert [v["mount_path"] for v in named["stored"]["volumes"]] == ["/cache", "/data"]
    assert [d["dataset"] for d in named["stored"]["datasets"]] == ["weights-a", "weights-b"]
    # Items-shaped ones queue behind the other organization's instance of the same shape; policy-shaped apart.
    assert [named[f"wait-{i}"]["waitlist_position"] for i in range(6)] == [2, 1, 3, 2, 4, 3]


def test_cursor_pages_of_the_list_take_as_many_queries_as_any_page(client, owner):
    made = _mixed(owner)
    first, body = list_queries(client, f"{URL}?limit=2&cursor=")
    assert body["count"] is None and len(body["results"]) == 2
    second, body = list_queries(client, _path(body["next"]))
    back, _ = list_queries(client, _path(body["previous"]))
    for i in range(40):  # a longer list, and a longer waitlist on the platform
        InstanceFactory(organization=owner.organization, state="waitlisted", waitlist=True, name=f"more-{i}")
        InstanceFactory(state="waitlisted", waitlist=True)
    large, body = list_queries(client, f"{URL}?limit=100&cursor=")
    assert len(body["results"]) == len(made) + 40
    offset, _ = list_queries(client, f"{URL}?limit=100")
    # The session's 3, the page with its figures, its waitlist positions; by offset also the count.
    assert first == second == back == large == offset - 1 == 3 + 2
