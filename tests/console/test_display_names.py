"""Customers read accelerators by name in console messages and usage tables, never by catalog slug
(slugs stay in form values and in the API)."""
import re

import pytest

from billing.funds import spend
from billing.models_products import SponsorshipProposal
from billing.products.statements import statement_months
from tests.console.conftest import login_client
from tests.console.test_instances import H100_2, _sell_out
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory

pytestmark = [pytest.mark.pg, pytest.mark.django_db]
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
    assert f"bare metal {H100} takes whole nodes" in page and "h100-sxm-80g takes" not in page


def test_refused_start_names_the_accelerator_with_and_without_javascript(web, owner):
    inst = InstanceFactory(organization=owner.organization, state="stopped")
    _sell_out("h100-sxm-80g")
    live = web.post(f"/instances/{inst.pk}/start/", HTTP_HX_REQUEST="true").content.decode()
    assert f"Not enough free capacity: {H100} short by 1" in _block(live, "action-error")
    page = web.post(f"/instances/{inst.pk}/start/", follow=True).content.decode()
    assert f"Not enough free capacity: {H100} short by 1" in page and "h100-sxm-80g short" not in page


def test_usage_tables_and_proposals_name_the_accelerator(web, owner):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running")
    meter = MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g", cards=2)
    spend(org=org, amount=123_456, key=f"meter:{meter.pk}:60", code="meter", meter_id=meter.pk, instance_id=inst.pk)
    SponsorshipProposal.objects.create(organization=org, title="Climate", abstract="Models",
                                       accelerator="h100-sxm-80g", card_hours=5)
    usage = web.get("/billing/").content.decode().split('id="usage"')[1]
    assert f'<td class="acc-name">{H100}</td>' in usage and "h100-sxm-80g" not in usage
    statement = login_client(owner).get(f"/billing/statements/{statement_months(org=org)[0]}/").content.decode()
    assert f"<td>{H100}</td>" in statement and "<td>h100-sxm-80g</td>" not in statement
    proposals = web.get("/billing/sponsorships/").content.decode().split("</table>")[0]
    assert f"<td>{H100}</td>" in proposals and "h100-sxm-80g" not in proposals
