"""Customers read accelerators by name in console messages and usage tables, never by catalog slug
(slugs stay in form values and in the API); service refusals read as sentences (console/service_text.py)."""
import re

import pytest

from billing.models_products import SponsorshipProposal
from billing.products.statements import statement_months
from tests.console.conftest import login_client
from tests.console.test_instances import H100_2, _sell_out
from tests.factories.billing import MeterFactory, meter_spend
from tests.factories.provisioning import InstanceFactory, container_body

pytestmark = pytest.mark.django_db
H100 = "NVIDIA H100 SXM 80GB"


def _block(page: str, element_id: str) -> str:
    """The text of the element with this id up to its closing tag (tags stripped)."""
    start = page.index(f'id="{element_id}"')
    end = page.index("</div>", start)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page[start:end]))


def test_sold_out_create_and_quote_name_the_accelerator(web):
    _sell_out("h100-sxm-80g")
    page = web.post("/instances/new/", H100_2).content.decode()
    error, soldout = _block(page, "form-errors"), _block(page, "quote-soldout")
    assert f"Not enough free capacity: {H100} short by 2" in error and "h100-sxm-80g" not in error
    assert f"Missing: 2 × {H100}." in soldout and "h100-sxm-80g" not in soldout
    assert 'value="h100-sxm-80g"' in page  # the form's values stay slugs


def test_policy_shortfall_reads_as_cards(web):
    _sell_out("h100-sxm-80g")
    policy = {**H100_2, "mode": "policy", "total_cards": "8", "compatible_vendors": ["nvidia"]}
    page = web.post("/instances/quote/", policy, HTTP_HX_REQUEST="true").content.decode()
    assert "Missing: 8 cards." in _block(page, "quote-soldout") and "× total" not in page


def test_quote_refusal_names_the_accelerator(web):
    page = web.post("/instances/quote/", {**H100_2, "kind": "bare_metal", "count": "4"}).content.decode()
    assert f"Bare metal {H100} takes whole nodes" in page and "h100-sxm-80g takes" not in page


def test_refused_start_names_the_accelerator_with_and_without_javascript(web, owner):
    inst = InstanceFactory(organization=owner.organization, state="stopped")
    _sell_out("h100-sxm-80g")
    live = web.post(f"/instances/{inst.pk}/start/", HTTP_HX_REQUEST="true").content.decode()
    assert f"Not enough free capacity: {H100} short by 1." in _block(live, "action-error")
    page = web.post(f"/instances/{inst.pk}/start/", follow=True).content.decode()
    assert f"Not enough free capacity: {H100} short by 1." in page and "h100-sxm-80g short" not in page


def test_usage_tables_and_proposals_name_the_accelerator(web, owner):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running")
    meter = MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g", cards=2)
    meter_spend(org=org, meter=meter, amount=123_456, through=60, instance_id=inst.pk)
    SponsorshipProposal.objects.create(organization=org, title="Climate", abstract="Models",
                                       accelerator="h100-sxm-80g", card_hours=5)
    usage = web.get("/billing/").content.decode().split('id="usage"')[1]
    assert f'<td class="acc-name">{H100}</td>' in usage and "h100-sxm-80g" not in usage
    statement = login_client(owner).get(f"/billing/statements/{statement_months(org=org)[0]}/").content.decode()
    assert f"<td>{H100}</td>" in statement and "<td>h100-sxm-80g</td>" not in statement
    proposals = web.get("/billing/sponsorships/").content.decode().split("</table>")[0]
    assert f"<td>{H100}</td>" in proposals and "h100-sxm-80g" not in proposals


def _sentences(page: str) -> str:
    """The console's messages about a request: form errors, the quote's refusal, an action's error."""
    found = [_block(page, i) for i in ("form-errors", "action-error") if f'id="{i}"' in page]
    found += re.findall(r'id="quote-error">([^<]*)<', page)
    return " ".join(found)


def test_service_refusals_read_as_sentences_in_the_console_not_in_the_api(web, owner):
    # One item: no "item 0:" prefix; a capital and a full stop.
    one = {**H100_2, "kind": "bare_metal", "count": "4"}
    for page in (web.post("/instances/quote/", one).content.decode(), web.post("/instances/new/", one).content.decode()):
        text = _sentences(page)
        assert f"Bare metal {H100} takes whole nodes: count must be a multiple of 8." in text
        assert "item 0" not in text.lower() and "Item 1" not in text
    # Two items: each wrong item is reported (not only the first), by its accelerator, never "Item 2".
    two = {**H100_2, "kind": "bare_metal", "count": "8", "accelerator2": "ascend-910b", "count2": "3"}
    for page in (web.post("/instances/quote/", two).content.decode(), web.post("/instances/new/", two).content.decode()):
        text = _sentences(page)
        assert "Bare metal Huawei Ascend 910B takes whole nodes" in text and "Item 2" not in text
    both = {**two, "count": "4"}
    for page in (web.post("/instances/quote/", both).content.decode(), web.post("/instances/new/", both).content.decode()):
        text = _sentences(page)
        assert f"Bare metal {H100} takes whole nodes: count must be a multiple of 8." in text, text
        assert "Bare metal Huawei Ascend 910B takes whole nodes" in text and "Item " not in text
    # Vendors and kinds by name, without the API's request syntax.
    text = _sentences(web.post("/instances/new/", {**H100_2, "image_nvidia": ""}).content.decode())
    assert "Name an image for NVIDIA." in text and "nvidia" not in text and "images:" not in text
    policy = {**H100_2, "mode": "policy", "total_cards": "40", "compatible_vendors": ["nvidia", "huawei"]}
    text = _sentences(web.post("/instances/quote/", policy).content.decode())
    assert "at most 32 cards for NVIDIA, Huawei; use bare metal for more." in text and "bare_metal" not in text
    # A start refused for capacity ends as a sentence; a stale button's refusal says what the instance is.
    inst = InstanceFactory(organization=owner.organization, state="stopped")
    _sell_out("h100-sxm-80g")
    live = web.post(f"/instances/{inst.pk}/start/", HTTP_HX_REQUEST="true").content.decode()
    assert f"Not enough free capacity: {H100} short by 1." in _sentences(live)
    live = web.post(f"/instances/{inst.pk}/stop/", HTTP_HX_REQUEST="true").content.decode()
    text = _sentences(live)
    assert "The instance is stopped now, so it cannot be stopped." in text and "InstanceState" not in text
    # The API keeps its messages: callers match them.
    api = login_client(owner).post("/api/v1/instances/", {**container_body(count=4), "kind": "bare_metal"},
                                   content_type="application/json").json()
    assert "item 0: bare metal h100-sxm-80g takes whole nodes" in str(api)
