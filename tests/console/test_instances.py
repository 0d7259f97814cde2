"""Console instance pages with the Django test client: create (no JavaScript needed), service errors next
to the form, the quote partial, buttons from the transition table, polling that stops, tenant isolation."""
import html
import re

import pytest

from inventory.models import Accelerator, Card
from provisioning.models import Instance
from tests.console.conftest import login_client
from tests.factories.inventory import CardAllocationFactory
from tests.factories.provisioning import InstanceFactory, funded

pytestmark = pytest.mark.django_db

H100_2 = {"name": "train-1", "mode": "items", "kind": "container", "accelerator": "h100-sxm-80g", "count": "2",
          "image_nvidia": "pytorch-2.3-cuda12.3", "image_huawei": "cann-torch-npu", "billing": "on_demand",
          "package_renewal": "stop"}


def _sell_out(slug):
    for card in Card.objects.filter(node__accelerator__slug=slug):
        CardAllocationFactory(card=card)


def test_create_without_javascript_posts_and_redirects_to_the_detail(web, owner):
    r = web.post("/instances/new/", H100_2)
    assert r.status_code == 302
    inst = Instance.objects.get(organization=owner.organization)
    assert r["Location"] == f"/instances/{inst.pk}/"
    assert inst.state == "provisioning" and inst.items[0]["count"] == 2 and inst.price_per_hour == 3_800_000
    page = web.get(r["Location"]).content.decode()
    assert "train-1" in page and 'data-state="provisioning"' in page and 'hx-trigger="every 2s"' in page
    # A container's sshd is published at CONTAINER_SSH_PORT_BASE + its first card (provisioning/endpoints.py).
    assert "¥3.80" in page and re.search(r"ssh -p 30\d{3} root@", page) and 'data-copy="#ssh-1"' in page
    # provisioning → checking, terminating and failed are legal; only Terminate is a customer action here.
    assert 'data-action="terminate"' in page and 'data-action="stop"' not in page


def test_quota_error_shows_next_to_the_form_and_keeps_the_input(web, owner):
    owner.organization.card_quota = 1
    owner.organization.save(update_fields=["card_quota"])
    r = web.post("/instances/new/", {**H100_2, "name": "keep-me"})
    assert r.status_code == 409
    page = r.content.decode()
    assert 'id="form-errors"' in page and "quota" in page
    assert 'value="keep-me"' in page and 'value="2"' in page
    assert not Instance.objects.filter(organization=owner.organization).exists()


def test_insufficient_funds_is_shown(member_factory, fleet):
    poor = member_factory(role="owner")
    r = login_client(poor).post("/instances/new/", H100_2)
    assert r.status_code == 402 and "Top up first" in r.content.decode()


def test_sold_out_offers_the_waitlist_and_joining_shows_the_position(web, owner):
    _sell_out("ascend-910b")
    body = {**H100_2, "accelerator": "ascend-910b", "count": "1", "name": "npu"}
    r = web.post("/instances/new/", body)
    assert r.status_code == 409
    page = r.content.decode()
    assert 'id="quote-soldout"' in page and 'name="waitlist"' in page
    r = web.post("/instances/new/", {**body, "waitlist": "on"})
    assert r.status_code == 302
    detail = web.get(r["Location"]).content.decode()
    assert 'data-state="waitlisted"' in detail and re.search(r'id="waitlist-position">Position <strong>1</strong>',
                                                              detail)


def test_a_ticked_waitlist_stays_ticked_whatever_the_quote_shows_without_javascript(web, owner):
    # The checkbox lived in the sold-out banner of the quote: over the card quota, or with a count the quote cannot
    # price, the banner (and the checkbox) gave way to another note, so the next "Update price" or Create posted
    # no waitlist and the customer's choice was lost. It is now part of the form, outside the quote.
    _sell_out("ascend-910b")
    owner.organization.card_quota = 1
    owner.organization.save(update_fields=["card_quota"])
    body = {**H100_2, "accelerator": "ascend-910b", "count": "1", "name": "npu", "waitlist": "on"}
    ticked = re.compile(r'<input type="checkbox" name="waitlist" id="id_waitlist" checked>')
    for count, note in (("1", 'id="quote-soldout"'), ("2", 'id="quote-quota"'), ("0", 'id="quote-error"')):
        page = web.post("/instances/new/", {**body, "count": count, "preview": "1"}).content.decode()
        assert note in page and len(ticked.findall(page)) == 1, count
    unticked = web.post("/instances/new/", {**body, "waitlist": "", "preview": "1"}).content.decode()
    assert 'id="id_waitlist"' in unticked and not ticked.search(unticked)
    # What htmx swaps (the quote partial) never holds it, whatever it shows.
    for count in ("1", "2", "0"):
        assert 'name="waitlist"' not in web.post("/instances/quote/", {**body, "count": count}).content.decode()
    r = web.post("/instances/new/", body)
    assert r.status_code == 302 and Instance.objects.get(organization=owner.organization).state == "waitlisted"


def test_quote_partial_prices_the_mix_and_names_the_topology(web):
    r = web.post("/instances/quote/", H100_2, HTTP_HX_REQUEST="true")
    page = r.content.decode()
    assert r.status_code == 200 and "<html" not in page
    assert 'data-ucny="3800000"' in page and "¥3.80" in page and "NVLink / NVSwitch" in page
    assert 'id="quote-available"' in page
    # Hybrid: one image per vendor, both parts in one zone over its fabric.
    hybrid = {**H100_2, "accelerator2": "ascend-910b", "count2": "2"}
    page = web.post("/instances/quote/", hybrid).content.decode()
    assert "HCCS" in page and "Hybrid" in page and 'data-ucny="8600000"' in page
    # Bare metal across two nodes: InfiniBand / RoCE between them.
    bm = {**H100_2, "kind": "bare_metal", "count": "16"}
    page = web.post("/instances/quote/", bm).content.decode()
    assert "on 2 nodes" in page and "InfiniBand / RoCE across nodes" in page
    # Policy mode: the quote says which mix it chose.
    policy = {**H100_2, "mode": "policy", "total_cards": "8", "compatible_vendors": ["nvidia", "huawei"],
              "min_domestic_percent": "50"}
    page = web.post("/instances/quote/", policy).content.decode()
    assert "Ascend" in page and "domestic share" in page
    # Monthly: the rate is shown exactly (1.235, not 1.24), so its row adds up (4 × 1.235 = 4.94).
    monthly = web.post("/instances/quote/", {**H100_2, "count": "4", "billing": "monthly"}).content.decode()
    assert "¥1.235/card-h" in monthly and "¥4.94/h" in monthly and "¥1.24/card-h" not in monthly
    # Sold out: it says so and points to the waitlist (the checkbox is the form's, outside the quote).
    _sell_out("h100-sxm-80g")
    page = web.post("/instances/quote/", H100_2).content.decode()
    assert 'id="quote-soldout"' in page and "waitlist" in page


def test_sold_out_policy_quote_shows_the_shortfall_not_a_zero_price(web):
    _sell_out("h100-sxm-80g")
    policy = {**H100_2, "mode": "policy", "total_cards": "8", "compatible_vendors": ["nvidia"]}
    for page in (web.post("/instances/quote/", policy, HTTP_HX_REQUEST="true").content.decode(),
                 web.post("/instances/new/", {**policy, "preview": "1"}).content.decode()):  # without JavaScript
        quote = page[page.index("<h2>Price</h2>"):]
        assert 'id="quote-soldout"' in quote and "Missing: 8 cards." in quote
        assert "¥0.00" not in quote and "/hour" not in quote and "domestic share" not in quote
        assert 'id="quote-mix"' not in quote and 'id="quote-price"' not in quote


def test_buttons_follow_the_transition_table_and_polling_stops_when_settled(web, owner):
    org = owner.organization
    # Retry is no transition (failed only goes on to terminating): a new instance with the same request.
    expected = {"running": {"stop", "terminate"}, "stopped": {"start", "terminate"}, "failed": {"retry", "terminate"},
                "terminated": set(), "waitlisted": {"terminate"}}
    for state, actions in expected.items():
        inst = InstanceFactory(organization=org, state=state)
        page = web.get(f"/instances/{inst.pk}/", HTTP_HX_REQUEST="true").content.decode()
        assert page.lstrip().startswith('<section id="instance-live"'), page[:200]
        assert set(re.findall(r'data-action="(\w+)"', page)) == actions, state
        polls = re.search(r'hx-trigger="([^"]+)"', page)
        if state in ("stopped", "failed", "terminated"):
            assert polls is None, state
        else:
            assert polls.group(1) == ("every 10s" if state in ("running", "waitlisted") else "every 2s")


def test_action_forms_work_without_javascript_and_refuse_illegal_ones(web, owner):
    inst = InstanceFactory(organization=owner.organization, state="stopped")
    r = web.post(f"/instances/{inst.pk}/stop/")
    assert r.status_code == 302
    assert "The instance is stopped now, so it cannot be stopped." in web.get(r["Location"]).content.decode()
    r = web.post(f"/instances/{inst.pk}/terminate/")
    assert r.status_code == 302
    inst.refresh_from_db()
    assert inst.state == "terminating"
    # htmx: the live block comes back in place, with the error inline.
    r = web.post(f"/instances/{inst.pk}/start/", HTTP_HX_REQUEST="true")
    assert r.status_code == 200 and 'id="action-error"' in r.content.decode()


def test_viewer_sees_no_buttons_and_cannot_act(member_factory, owner):
    viewer = member_factory(role="viewer", org=owner.organization)
    inst = InstanceFactory(organization=owner.organization, state="running")
    client = login_client(viewer)
    page = client.get(f"/instances/{inst.pk}/").content.decode()
    assert "data-action" not in page
    assert client.post(f"/instances/{inst.pk}/stop/").status_code == 403
    assert client.post("/instances/new/", H100_2).status_code == 403
    billing_role = member_factory(role="billing", org=owner.organization)
    assert login_client(billing_role).get("/instances/").status_code == 404  # billing role reads no instances


def test_another_organizations_instance_is_404_in_console_and_api(web, member_factory, session_client_for):
    stranger = funded(member_factory(role="owner"))
    theirs = InstanceFactory(organization=stranger.organization, state="running")
    for url in (f"/instances/{theirs.pk}/", "/instances/not-a-uuid/"):
        assert web.get(url).status_code == 404
        assert web.get(url, HTTP_HX_REQUEST="true").status_code == 404
    for action in ("stop", "start", "terminate"):
        assert web.post(f"/instances/{theirs.pk}/{action}/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == "running"
    assert session_client_for(stranger).get(f"/api/v1/instances/{theirs.pk}/").status_code == 200
    from rest_framework.test import APIClient  # the API answers the same 404 to the intruder
    api = APIClient()
    api.cookies = web.cookies
    assert api.get(f"/api/v1/instances/{theirs.pk}/").status_code == 404


def test_list_filters_by_state_and_has_empty_states(web, owner):
    assert "Create your first instance" in web.get("/instances/").content.decode()
    InstanceFactory(organization=owner.organization, state="running", name="alpha")
    InstanceFactory(organization=owner.organization, state="stopped", name="beta")
    page = web.get("/instances/?state=running").content.decode()
    assert "alpha" in page and "beta" not in page
    assert "No instances in state" in web.get("/instances/?state=failed").content.decode()


def test_chinese_card_names_display_as_written(web):
    Accelerator.objects.filter(slug="ascend-910b").update(name="华为昇腾 910B")
    page = web.get("/instances/new/").content.decode()
    assert "华为昇腾 910B" in page and 'charset="utf-8"' in page


def test_zone_picker_lists_zones_with_free_cards_and_pins_the_placement(web, owner):
    """Each zone lists its free cards per accelerator (before: one sum over all accelerators, "24 free")."""
    from tests.factories.inventory import ZoneFactory
    from tests.factories.provisioning import make_fleet

    make_fleet(zone="zone-b", h100=1)
    ZoneFactory(slug="zone-c", name="zone-c")
    page = html.unescape(web.get("/instances/new/").content.decode())
    assert '<option value="" selected>Any zone (Cardmix picks)</option>' in page
    assert re.search(r'<option value="zone-b">zone-b · [^<]* · free: 8 × NVIDIA H100 SXM 80GB</option>', page)
    assert re.search(r'<option value="zone-a">zone-a · [^<]* · free: [^<]*</option>', page)
    zone_a = re.search(r'<option value="zone-a">zone-a · [^<]* · free: ([^<]*)</option>', page).group(1)
    names = dict(Accelerator.objects.values_list("slug", "name"))
    assert zone_a == f"8 × {names['ascend-910b']}, 16 × {names['h100-sxm-80g']}"
    assert re.search(r'<option value="zone-c">zone-c · [^<]* · no cards</option>', page)
    r = web.post("/instances/new/", {**H100_2, "zone": "zone-b"})
    assert r.status_code == 302, r.content.decode()[-2000:]
    inst = Instance.objects.get(organization=owner.organization)
    assert inst.zone.slug == "zone-b"
    assert {g.node.zone.slug for g in inst.groups.select_related("node__zone")} == {"zone-b"}
    # Pinned to a zone without the cards: the quote says so, and creating is refused (nothing kept).
    quote = web.post("/instances/quote/", {**H100_2, "accelerator": "ascend-910b", "zone": "zone-b"},
                     HTTP_HX_REQUEST="true").content.decode()
    assert 'id="quote-soldout"' in quote
    refused = web.post("/instances/new/", {**H100_2, "accelerator": "ascend-910b", "zone": "zone-b", "name": "npu"})
    assert refused.status_code == 409 and Instance.objects.filter(organization=owner.organization).count() == 1
    bad = web.post("/instances/new/", {**H100_2, "zone": "zone-mars"})
    assert bad.status_code == 200 and "Select a valid choice" in bad.content.decode()


@pytest.mark.parametrize("state, says", [
    ("stopped", "Start it to connect again"),
    ("stopping", "cards are being released"),  # not yet "released"
    ("terminated", "nothing to connect to any more"),
    ("failed", "nothing to connect to"),
])
def test_connect_says_why_there_is_no_ssh_command_once_the_cards_are_gone(web, owner, state, says):
    # A stopped or terminated instance used to promise "SSH commands appear once cards are placed".
    inst = InstanceFactory(organization=owner.organization, state=state, name="gone")
    page = web.get(f"/instances/{inst.pk}/").content.decode()
    assert 'id="ssh-none"' in page and says in page and "appear once cards are placed" not in page


def test_create_form_ticks_the_users_ssh_keys_so_the_instance_can_be_logged_into(web, owner):
    from tenancy.services import ssh_key_add
    from tests.factories.tenancy import ed25519_public_key

    keys = [ssh_key_add(user=owner.user, name=f"k{i}", public_key=ed25519_public_key(f"k{i}")) for i in range(2)]
    page = web.get("/instances/new/").content.decode()
    for key in keys:
        assert re.search(rf'<input type="checkbox" name="ssh_key_ids" value="{key.pk}"[^>]* checked', page)
    # Unticking one is kept: a no-JavaScript price update does not tick it again.
    page = web.post("/instances/new/", {**H100_2, "preview": "1", "ssh_key_ids": [str(keys[0].pk)]}).content.decode()
    assert re.search(rf'value="{keys[0].pk}"[^>]* checked', page)
    assert not re.search(rf'value="{keys[1].pk}"[^>]* checked', page)
    r = web.post("/instances/new/", {**H100_2, "ssh_key_ids": [str(k.pk) for k in keys]})
    assert r.status_code == 302
    assert Instance.objects.get(organization=owner.organization).ssh_key_ids == [str(k.pk) for k in keys]


def test_quote_warns_about_the_card_quota_instead_of_saying_available_now(web, owner):
    owner.organization.card_quota = 1
    owner.organization.save(update_fields=["card_quota"])
    page = web.post("/instances/quote/", H100_2, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="quote-quota"' in page and 'id="quote-available"' not in page
    assert "this needs 2 cards, and 0 of your organization&#x27;s 1 are in use" in page
    page = web.post("/instances/quote/", {**H100_2, "count": "1"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="quote-available"' in page and 'id="quote-quota"' not in page
    # The no-JavaScript form shows the same warning with the price.
    page = web.post("/instances/new/", {**H100_2, "preview": "1"}).content.decode()
    assert 'id="quote-quota"' in page


def test_insufficient_funds_names_amounts_in_yuan_not_api_decimals(member_factory, fleet):
    poor = member_factory(role="owner")
    page = login_client(poor).post("/instances/new/", H100_2).content.decode()
    # The service's "0.000000 CNY … (0.166667 h at 3.800000 CNY/h)" is for API callers.
    # The need rounds up to the fen (0.633333 → ¥0.64), the funds down: never "¥10.00 do not cover ¥10.00".
    assert "Available funds ¥0.00 do not cover ¥0.64 (10 min at ¥3.80/h). Top up first." in page
    assert " CNY" not in page.split('id="form-errors"')[1].split("</div>")[0]
    monthly = login_client(poor).post("/instances/new/", {**H100_2, "billing": "monthly"}).content.decode()
    assert "(720 h at ¥2.47/h)" in monthly and "¥1,778.40" in monthly
