"""Query counts that do not grow with the rows, for the lists and pages the apps' own tests leave out.

Already covered elsewhere (not repeated here): tenancy's member/token/ssh-key/audit lists
(tests/tenancy/test_accounts.py), accelerators and admin nodes/cards (tests/inventory/test_api.py),
billing transfers/usage (tests/billing/test_api.py), sponsorships/invoices/statements API
(tests/billing_products/test_api.py), top-ups (tests/payments/), instances API
(tests/provisioning/test_api.py), console dashboard/instances/billing/instance detail/quote
(tests/console/test_query_counts.py), console top-up page (tests/payments/test_console_topup.py).
"""
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories.inventory import CATALOG_EPOCH, ImageFactory, PriceFactory, accelerator
from tests.factories.provisioning import InstanceFactory, make_fleet

pytestmark = pytest.mark.django_db


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return len(ctx.captured_queries)


def _staff(member_factory, session_client_for):
    membership = member_factory(role="owner")
    membership.user.is_staff = True
    membership.user.save(update_fields=["is_staff"])
    return session_client_for(membership)


# --- API lists ---------------------------------------------------------------------------------------

def test_image_lists_do_not_grow(member_factory, session_client_for):
    viewer = session_client_for(member_factory(role="viewer"))
    staff = _staff(member_factory, session_client_for)
    counts = []
    made = 0
    for total in (2, 50):
        while made < total:
            ImageFactory(slug=f"obs-image-{made}")
            made += 1
        counts.append((_count(viewer, "/api/v1/images/?limit=500"),
                       _count(staff, "/api/v1/admin-api/images/?limit=500")))
    assert counts[0] == counts[1], counts
    assert viewer.get("/api/v1/images/?limit=500").json()["count"] >= 50


def test_admin_price_list_does_not_grow(member_factory, session_client_for, catalog):
    staff = _staff(member_factory, session_client_for)
    acc = accelerator("h100-sxm-80g")
    counts = []
    made = 0
    for total in (2, 50):
        while made < total:
            PriceFactory(accelerator=acc, effective_from=CATALOG_EPOCH + timedelta(days=made + 1))
            made += 1
        counts.append(_count(staff, "/api/v1/admin-api/prices/?limit=500"))
    assert counts[0] == counts[1], counts
    assert staff.get("/api/v1/admin-api/prices/?limit=500").json()["count"] >= 50


def _events_and_reports(instance, node, n):
    from provisioning.models import InstanceEvent, ReadinessReport

    now = timezone.now()
    InstanceEvent.objects.bulk_create([InstanceEvent(instance=instance, from_state="pending", to_state="provisioning",
                                                     reason=f"step {i}", created_at=now) for i in range(n)])
    ReadinessReport.objects.bulk_create([
        ReadinessReport(instance=instance, node=node, scope="intra_node", tool="nccl-tests", cards=[0, 1],
                        busbw_largest_gbps=400.0, floor_gbps=235.0, passed=True, raw_output="ok",
                        started_at=now, finished_at=now) for _ in range(n)])


@pytest.mark.parametrize("suffix", ["events/", "readiness/"])
def test_instance_events_and_readiness_do_not_grow(suffix, member_factory, session_client_for):
    node = make_fleet(h100=1)[0]
    counts = []
    for n in (2, 50):
        owner = member_factory(role="owner")
        instance = InstanceFactory(organization=owner.organization, state="running")
        _events_and_reports(instance, node, n)
        client = session_client_for(owner)
        url = f"/api/v1/instances/{instance.pk}/{suffix}?limit=500"
        counts.append(_count(client, url))
        body = client.get(url).json()
        assert (body["count"] if isinstance(body, dict) else len(body)) >= n
    assert counts[0] == counts[1], counts


# --- console pages --------------------------------------------------------------------------------

def _orgs(owner, n):
    from tenancy.models import Membership
    from tests.factories.tenancy import OrganizationFactory

    for _ in range(n):
        Membership.objects.create(organization=OrganizationFactory(), user=owner.user, role="member")


def _members(owner, n):
    from tenancy.models import Membership
    from tests.factories.tenancy import UserFactory

    for _ in range(n):
        Membership.objects.create(organization=owner.organization, user=UserFactory(), role="viewer")


def _tokens(owner, n):
    from tests.factories.tenancy import make_token

    for i in range(n):
        make_token(owner, name=f"token {i}")


def _ssh_keys(owner, n):
    from tenancy.models import SshKey
    from tests.factories.tenancy import ed25519_public_key

    for k in range(n):
        SshKey.objects.create(user=owner.user, name=f"k{k}", key_type="ssh-ed25519",
                              public_key=ed25519_public_key(f"k{k}"), fingerprint=f"SHA256:{owner.pk}{k}")


def _sponsorships(owner, n):
    from billing.models_products import SponsorshipProposal

    for i in range(n):
        SponsorshipProposal.objects.create(organization=owner.organization, title=f"p{i}", abstract="a",
                                           accelerator="h100-sxm-80g", card_hours=1)


def _invoices(owner, n):
    from billing.models_products import Invoice

    for i in range(n):
        Invoice.objects.create(organization=owner.organization, period=date(1970 + i, 1, 1), amount_due=i + 1)


def _statements(owner, n):
    from billing.credits import cash_credit
    from billing.ledger import platform_accounts_ensure
    from tests.factories.billing_products import posted_at

    platform_accounts_ensure()
    for i in range(n):
        with posted_at(datetime(1970 + i, 6, 1, tzinfo=ZoneInfo("UTC"))):
            cash_credit(org=owner.organization, amount=1_000_000, key=f"obs:{owner.organization_id}:{i}",
                        code="topup")


@pytest.mark.parametrize(("url", "fill"), [
    ("/account/organizations/", _orgs),
    ("/account/members/", _members),
    ("/account/tokens/", _tokens),
    ("/account/ssh-keys/", _ssh_keys),
    ("/billing/sponsorships/", _sponsorships),
    ("/billing/invoices/", _invoices),
    ("/billing/statements/", _statements),
])
def test_console_pages_do_not_grow(url, fill, member_factory):
    from tests.console.conftest import login_client

    counts = []
    for n in (2, 50):
        owner = member_factory(role="owner")
        fill(owner, n)
        counts.append(_count(login_client(owner), url))
    assert counts[0] == counts[1], f"{url}: {counts[0]} queries for 2 rows, {counts[1]} for 50"
