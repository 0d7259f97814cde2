"""Every time the console shows is in the billing time zone (Asia/Shanghai) and says so; none is a bare UTC time."""
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from billing.models_payments import TopUp
from billing.products.packages import package_start
from billing.products.statements import statement_months
from provisioning.models import Instance, InstanceEvent
from tenancy.models import ApiToken
from tests.factories.billing import MeterFactory
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import make_token

pytestmark = pytest.mark.django_db
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # 11:04:05 in Shanghai
TIME = re.compile(r"\b\d{2}:\d{2}(?::\d{2})?\b")


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _unlabelled_times(html: str) -> list[str]:
    """Each hh:mm in the page's text that is not followed by the billing zone's label."""
    text = _text(html)
    return [text[max(m.start() - 30, 0):m.end() + 10] for m in TIME.finditer(text)
            if not text.startswith(" UTC+8", m.end())]


@pytest.fixture
def busy_org(owner):
    """An organization with something to show on every page that shows times."""
    org = owner.organization
    inst = InstanceFactory(organization=org, state="running", name="gpu-box", billing="monthly",
                           sla_deadline=timezone.now() + timedelta(minutes=10))
    Instance.objects.filter(pk=inst.pk).update(created_at=CREATED)
    InstanceEvent.objects.create(instance=inst, from_state="", to_state="pending", reason="create", created_at=CREATED)
    package_start(org=org, instance_id=inst.pk, items=[{"accelerator": "h100-sxm-80g", "cards": 1, "rate": 1_235_000}])
    MeterFactory(organization=org, instance_id=inst.pk, accelerator="h100-sxm-80g", cards=1)  # burns: exhausts_at
    token, _ = make_token(owner, expires_at=datetime(2027, 1, 30, 16, 0, tzinfo=UTC))
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=CREATED)
    TopUp.objects.create(organization=org, amount=100_000_000, amount_fen=10_000)
    return inst


def test_every_page_shows_times_in_the_billing_zone_labelled(web, owner, busy_org):
    month = statement_months(org=owner.organization)[0]
    pages = {url: web.get(url).content.decode() for url in (
        "/dashboard/", "/instances/", f"/instances/{busy_org.pk}/", "/billing/", "/account/tokens/",
        f"/billing/statements/{month}/", "/billing/topup/")}
    for url, html in pages.items():
        assert _unlabelled_times(html) == [], url
    assert "2026-01-02 11:04 UTC+8" in _text(pages["/instances/"])
    detail = _text(pages[f"/instances/{busy_org.pk}/"])
    assert "created 2026-01-02 11:04 UTC+8" in detail and "2026-01-02 11:04:05 UTC+8" in detail
    assert re.search(r"Package period 1 ends \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\+8", detail)
    assert re.search(r"lasts until \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\+8", _text(pages["/dashboard/"]))
    tokens = _text(pages["/account/tokens/"])
    assert "2027-01-31 00:00 UTC+8" in tokens and "2026-01-02 11:04 UTC+8" in tokens
    assert "When (UTC)" not in pages["/billing/"] and TIME.search(_text(pages["/billing/topup/"]))


def test_a_typed_token_expiry_is_read_in_the_zone_the_form_names(web, owner):
    page = web.get("/account/tokens/").content.decode()
    assert "it stops working at 00:00 UTC+8 that day" in page and 'type="date"' in page
    web.post("/account/tokens/", {"name": "ci", "scope": "read", "expires_at": "2027-01-31"})
    token = ApiToken.objects.get(organization=owner.organization, name="ci")
    assert token.expires_at == datetime(2027, 1, 30, 16, 0, tzinfo=UTC)
    assert "2027-01-31 00:00 UTC+8" in _text(web.get("/account/tokens/").content.decode())
