"""Dashboard and billing pages: balances by kind, the low-balance banner, ledger lines, usage, the spend chart."""
import re

import pytest

from billing.models import BillingProfile
from tests.console.conftest import login_client
from tests.factories.billing import MeterFactory, backdate_meter, fund, meter_spend
from tests.factories.provisioning import InstanceFactory

pytestmark = pytest.mark.django_db


def test_dashboard_shows_balances_burn_and_running_instances(web, owner):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running", name="gpu-box")
    meter = backdate_meter(MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g",
                                        cards=1, rate=1_900_000), 3600)
    page = web.get("/dashboard/").content.decode()
    assert 'id="balance-cash" data-ucny="1000000000"' in page
    assert "gpu-box" in page and 'id="burn-rate">¥1.90' in page
    cost = int(re.search(r'data-ucny="(\d+)"', page.split("active-instances")[1]).group(1))
    # One hour (plus the seconds this test took) of 1 card at ¥1.90, accrued though no tick posted it yet.
    assert 1_900_000 <= cost <= 1_900_000 + 1_900_000 * 10 // 3600
    assert "low-balance-banner" not in page
    assert meter.pk


def test_low_balance_banner_under_one_hour(member_factory, fleet):
    poor = member_factory(role="owner")
    fund(poor.organization, 1_000_000, key="tiny")  # ¥1.00 at ¥19.00/h → about 3 minutes
    inst = InstanceFactory(organization=poor.organization, state="running")
    MeterFactory(organization=poor.organization, instance_id=inst.pk, cards=10, rate=1_900_000)
    page = login_client(poor).get("/dashboard/").content.decode()
    assert 'id="low-balance-banner"' in page and "Top up now" in page
    BillingProfile.objects.get_or_create(organization=poor.organization)


def test_billing_page_ledger_usage_chart_and_links(web, owner):
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running")
    meter = MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g", cards=2)

    meter_spend(org=org, meter=meter, amount=123_456, through=60, instance_id=inst.pk)
    for i in range(30):
        fund(org, 10_000 + i, key=f"page:{i}")
    page = web.get("/billing/").content.decode()
    assert f'data-meter="{meter.pk}"' not in page  # newest first: 25 per page, the spend is on page 2
    assert "Page 1 of 2" in page and 'id="spend-chart"' in page and "<rect" in page
    assert "/billing/statements/" in page and "/billing/sponsorships/" in page and "/billing/invoices/" in page
    page2 = web.get("/billing/?page=2", HTTP_HX_REQUEST="true").content.decode()
    assert page2.startswith('\n<div id="ledger">') or page2.lstrip().startswith('<div id="ledger">')
    assert f'data-meter="{meter.pk}"' in page2 and 'data-ucny="123456"' in page2
    usage = web.get("/billing/").content.decode()
    assert "NVIDIA H100 SXM 80GB" in usage.split('id="usage"')[1]  # the accelerator by name, not its slug


def test_billing_role_reads_billing_viewer_does_not(member_factory, owner):
    assert login_client(member_factory(role="billing", org=owner.organization)).get("/billing/").status_code == 200
    assert login_client(member_factory(role="viewer", org=owner.organization)).get("/billing/").status_code == 404


def test_usage_shows_instance_names_linked_for_roles_that_open_instances(web, owner, member_factory):
    from billing.products.statements import statement_months

    org = owner.organization
    inst = InstanceFactory(organization=org, state="running", name="gpu-box")
    stranger = InstanceFactory(state="running", name="not-yours")  # another organization's instance
    for i, instance_id in enumerate((inst.pk, stranger.pk)):  # a meter naming a foreign id must not leak its name
        meter = MeterFactory(organization=org, instance_id=instance_id, accelerator="h100-sxm-80g")
        meter_spend(org=org, meter=meter, amount=1_000 + i, through=60, instance_id=instance_id)
    link = f'<a href="/instances/{inst.pk}/" title="{inst.pk}" data-instance="{inst.pk}">gpu-box</a>'
    usage = web.get("/billing/").content.decode().split('id="usage"')[1]
    assert link in usage and f"<code>{str(inst.pk)[:8]}</code>" not in usage
    assert "not-yours" not in usage and f'<code title="{stranger.pk}">{str(stranger.pk)[:8]}</code>' in usage
    statement = web.get(f"/billing/statements/{statement_months(org=org)[0]}/").content.decode()
    assert link in statement and "not-yours" not in statement
    # The billing role reads billing but not instance pages: the name without a link that would 404.
    billing_role = login_client(member_factory(role="billing", org=org))
    usage = billing_role.get("/billing/").content.decode().split('id="usage"')[1]
    assert f'<span title="{inst.pk}" data-instance="{inst.pk}">gpu-box</span>' in usage
    assert f'href="/instances/{inst.pk}/"' not in usage


def test_ledger_reference_names_the_instance_linked_only_for_roles_that_open_it(web, owner, member_factory):

    org = owner.organization
    inst = InstanceFactory(organization=org, state="running", name="gpu-box")
    stranger = InstanceFactory(state="running", name="not-yours")  # another organization's id must not leak a name
    for i, instance_id in enumerate((inst.pk, stranger.pk)):
        meter = MeterFactory(organization=org, instance_id=instance_id, accelerator="h100-sxm-80g")
        meter_spend(org=org, meter=meter, amount=2_000 + i, through=60, instance_id=instance_id)

    def reference(client) -> str:
        ledger = client.get("/billing/").content.decode().split('id="ledger"')[1].split("</table>")[0]
        return "".join(re.findall(r'<td class="small muted">(.*?)</td></tr>', ledger, re.S))

    as_owner = reference(web)
    assert f'<a href="/instances/{inst.pk}/" title="{inst.pk}" data-instance="{inst.pk}">gpu-box</a>' in as_owner
    assert ">instance</a>" not in as_owner and "not-yours" not in as_owner
    assert f'<code title="{stranger.pk}">{str(stranger.pk)[:8]}</code>' in as_owner
    # The billing role reads the ledger but gets 404 on instance pages: the name, no link.
    as_billing = reference(login_client(member_factory(role="billing", org=org)))
    assert f'<span title="{inst.pk}" data-instance="{inst.pk}">gpu-box</span>' in as_billing
    assert "/instances/" not in as_billing


def test_statement_names_accounts_and_movements_as_people_read_them(web, owner):
    # It showed ledger slugs ("trial  trial  credit") in unheaded tables.
    from billing.credits import trial_grant
    from billing.products.statements import statement_months

    org = owner.organization
    trial_grant(org=org)
    page = web.get(f"/billing/statements/{statement_months(org=org)[0]}/").content.decode()
    movements = page.split("<h2>Other movements</h2>")[1]
    assert "<th>What</th><th>Account</th><th>Direction</th>" in movements
    assert "<td>Trial credit</td><td>Trial credit</td><td>Credit</td>" in movements
    balances = page.split("<h2>Balances</h2>")[1].split("</table>")[0]
    assert "<td>Trial credit</td>" in balances and "<td>trial</td>" not in balances
    topups = page.split("<h2>Top-ups</h2>")[1].split("</table>")[0]
    assert "<th>Reference</th>" in topups


@pytest.mark.parametrize("role", ["owner", "admin", "member", "billing", "viewer"])
def test_every_billing_page_answers_by_the_role_and_the_nav_links_only_what_opens(owner, member_factory, role):
    # A viewer got 404 on /billing/ and /billing/topup/ but 403 on statements, sponsorships and invoices. SPEC §5:
    # a viewer reads no billing at all (404 everywhere, as for another tenant's page); a member reads it but
    # cannot top up or submit (403 on those writes only).
    from billing.models_payments import TopUp
    from billing.products.statements import statement_months
    from tenancy.permissions import role_can

    org = owner.organization
    month = statement_months(org=org)[0]
    topup = TopUp.objects.create(organization=org, amount=10_000_000, amount_fen=1000)
    client = login_client(owner if role == "owner" else member_factory(role=role, org=org))
    reads = role_can(role, "read_billing")
    pages = ["/billing/", "/billing/?page=1", "/billing/topup/", f"/billing/topup/{topup.pk}/status/",
             "/billing/statements/", f"/billing/statements/{month}/", f"/billing/statements/{month}/csv/",
             "/billing/sponsorships/", "/billing/invoices/"]
    for url in pages:
        assert client.get(url).status_code == (200 if reads else 404), url
    proposal = {"title": "t", "abstract": "a", "accelerator": "h100-sxm-80g", "card_hours": 1}
    submitted = client.post("/billing/sponsorships/", proposal).status_code
    assert submitted == (302 if role_can(role, "billing") else 403 if reads else 404)
    # What the role's pages link to under /billing/ opens for it; a viewer is shown no billing link at all.
    seen = {"/dashboard/"} | ({"/billing/", "/billing/invoices/"} if reads else set())
    links = set()
    for url in seen:
        links |= set(re.findall(r'href="(/billing/[^"?#]*)', client.get(url).content.decode()))
    assert bool(links) is reads
    for url in links:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("role,tops_up", [("owner", True), ("admin", True), ("billing", True), ("member", False)])
def test_top_up_links_only_for_roles_that_may_top_up(member_factory, fleet, role, tops_up):
    """Before: a member (who reads billing but may not top up) was offered "Top up" on the dashboard, the billing
    page, their low-balance banners and the empty ledger, and the page they led to said the role cannot top up."""
    from django.urls import reverse

    topup = f'href="{reverse("console:billing_topup")}"'
    poor = member_factory(role="owner")
    fund(poor.organization, 1_000_000, key="tiny")  # ¥1.00 at ¥19.00/h: the low-balance banners show
    inst = InstanceFactory(organization=poor.organization, state="running")
    MeterFactory(organization=poor.organization, instance_id=inst.pk, cards=10, rate=1_900_000)
    client = login_client(poor if role == "owner" else member_factory(role=role, org=poor.organization))
    for url in ("/dashboard/", "/billing/"):
        page = client.get(url).content.decode()
        banner = page.split('id="low-balance-banner"')[1].split("</div>")[0]
        assert (topup in page, topup in banner, "Top up now" in banner) == (tops_up, tops_up, tops_up), url
        assert tops_up or "Ask a member who may top up" in banner
    empty = member_factory(role=role)  # an organization with no ledger line yet
    page = login_client(empty).get("/billing/").content.decode()
    assert "No ledger lines yet" in page and (topup in page) == tops_up
    page = login_client(empty).get("/billing/?page=1", HTTP_HX_REQUEST="true").content.decode()
    assert "No ledger lines yet" in page and (topup in page) == tops_up
