"""CPU and memory in proportion to cards on shared nodes (provisioning/card_share.py): the arithmetic, the
quote (API and console) and the agent driver's prepare payload."""
import pytest

from hardware.models import AgentCommand
from provisioning.card_share import card_share, cpus_text
from tests.factories.provisioning import container_body, make_fleet

GIB = 1024  # MiB


@pytest.mark.parametrize("cards, cpus, mib, want", [
    (2, 224, 2 * 1024 * GIB, (56_000, 512 * GIB)),
    (6, 224, 2 * 1024 * GIB, (168_000, 1536 * GIB)),
    (1, 100, 1_000_001, (12_500, 125_000)),  # floored to whole MiB
    (3, 10, 1000, (3_750, 375)),
    (1, 3, 7, (375, 0)),  # a thousandth of a CPU, a MiB: the granularity
    (8, 224, 2 * 1024 * GIB, (224_000, 2 * 1024 * GIB)),  # the whole node
    (2, None, None, (None, None)),  # a node of unknown size: no limit, not a guess
])
def test_card_share_is_the_node_times_cards_over_its_cards(cards, cpus, mib, want):
    share = card_share(cards=cards, card_count=8, cpu_cores=cpus, memory_mib=mib)
    assert (share.millicpus, share.memory_mib) == want


def test_cpus_and_gib_as_they_are_shown():
    assert [cpus_text(m) for m in (56_000, 13_500, 333, 1, 12_340)] == ["56", "13.5", "0.333", "0.001", "12.34"]
    assert card_share(cards=1, card_count=8, cpu_cores=100, memory_mib=2_063_731).memory_gib == 251.91


@pytest.mark.django_db
def test_the_quote_shows_the_cpus_and_memory_each_item_gets(client):
    """Before: a quote said nothing of CPU or memory, and a container could take the whole node's."""
    nodes = make_fleet(h100=1, ascend=1)
    from inventory.models import Node

    Node.objects.filter(pk=nodes[0].pk).update(cpu_cores=224, memory_mib=2 * 1024 * GIB)
    Node.objects.filter(pk=nodes[1].pk).update(cpu_cores=192, memory_mib=1024 * GIB)
    body = {**container_body("h100-sxm-80g", 2), "items": [{"accelerator": "h100-sxm-80g", "count": 2},
                                                            {"accelerator": "ascend-910b", "count": 3}],
            "images": {"nvidia": "pytorch-2.3-cuda12.3", "huawei": "cann-torch-npu"}}
    body.pop("image", None)
    r = client.post("/api/v1/quotes/", body, format="json")
    assert r.status_code == 200, r.json()
    items = {i["accelerator"]: (i["cpus"], i["memory_mib"], i["memory_gib"]) for i in r.json()["items"]}
    assert items == {"h100-sxm-80g": (56, 512 * GIB, 512), "ascend-910b": (72, 384 * GIB, 384)}
    bare = client.post("/api/v1/quotes/", {**container_body("h100-sxm-80g", 8), "kind": "bare_metal"},
                       format="json").json()
    assert (bare["items"][0]["cpus"], bare["items"][0]["memory_gib"]) == (224, 2048)  # the whole node
    sold_out = client.post("/api/v1/quotes/", container_body("h800-sxm-80g", 2), format="json").json()
    assert sold_out["available"] is False and sold_out["items"][0]["cpus"] is None  # not placed: not known


@pytest.mark.django_db
def test_the_console_quote_panel_says_what_the_cards_bring(web):
    from inventory.models import Node

    Node.objects.filter(accelerator__slug="h100-sxm-80g").update(cpu_cores=224, memory_mib=2 * 1024 * GIB)
    form = {"name": "train-1", "mode": "items", "kind": "container", "accelerator": "h100-sxm-80g", "count": "2",
            "image_nvidia": "pytorch-2.3-cuda12.3", "billing": "on_demand"}
    panel = web.post("/instances/quote/", form, HTTP_HX_REQUEST="true").content.decode()
    assert '<span class="muted small" data-share="h100-sxm-80g">with 56 CPUs and 512 GiB memory</span>' in panel
    Node.objects.update(cpu_cores=None, memory_mib=None)
    panel = web.post("/instances/quote/", form, HTTP_HX_REQUEST="true").content.decode()
    assert "data-share=" not in panel and "CPUs" not in panel  # unknown: nothing promised


@pytest.fixture
def web(member_factory):
    from tests.console.conftest import login_client
    from tests.factories.provisioning import funded

    make_fleet(h100=2)
    return login_client(funded(member_factory(role="owner")))


@pytest.mark.django_db
def test_the_agent_driver_sends_each_container_its_share(settings):
    """The prepare payload the agent enforces (its --cpus / --memory, cgroup or rlimit)."""
    from provisioning.drivers import get_driver
    from provisioning.services.fleet import node_ref
    from tests.factories.hardware import agent_node

    node, _ = agent_node(cpu_cores=16, memory_mib=64 * GIB)
    sized, _ = agent_node(cpu_cores=None, memory_mib=None)
    driver = get_driver("agent", poll_s=0.01, timeout_s=0.05)
    for n, cards in ((node, [0, 1]), (node, [2, 3, 4, 5, 6, 7]), (sized, [0])):
        driver.prepare(node_ref(n), cards, kind="container", image="x", ssh_keys=[], env={},
                       instance_id="11111111-2222-3333-4444-555555555555", ssh_port=30000 + cards[0])
    payloads = [c.payload for c in AgentCommand.objects.filter(kind="prepare").order_by("created_at", "pk")]
    assert [p.get("limits") for p in payloads] == [{"millicpus": 4000, "memory_mib": 16 * GIB},
                                                   {"millicpus": 12000, "memory_mib": 48 * GIB}, None]
