"""The create form's idempotency key, duplicate-name warning and funds note, with the Django test client (issue
33; the browser tests are in test_create_form_browser.py)."""
import re

import pytest

from core.models import IdempotencyRecord
from provisioning.models import Instance
from tests.console.conftest import login_client
from tests.console.test_instances import H100_2
from tests.factories.provisioning import InstanceFactory, funded

pytestmark = pytest.mark.django_db


def _key(page: str) -> str:
    return re.search(r'name="idempotency_key" value="([0-9a-f]{32})"', page).group(1)


def test_a_render_has_a_key_and_its_resubmission_creates_nothing_more(web, owner):
    key = _key(web.get("/instances/new/").content.decode())
    assert key != _key(web.get("/instances/new/").content.decode())  # one per render
    first = web.post("/instances/new/", {**H100_2, "idempotency_key": key})
    again = web.post("/instances/new/", {**H100_2, "idempotency_key": key}, follow=True)
    (inst,) = Instance.objects.filter(organization=owner.organization)
    assert first["Location"] == f"/instances/{inst.pk}/" == again.redirect_chain[-1][0]
    assert "Nothing was created twice" in again.content.decode()
    record = IdempotencyRecord.objects.get(key=key)
    assert (record.organization_id, record.path, record.state) == (str(owner.organization_id), "/instances/new/", "done")
    # The same render changed and sent again: refused (it already created one), with a fresh key to go on with.
    changed = web.post("/instances/new/", {**H100_2, "count": "1", "idempotency_key": key})
    page = changed.content.decode()
    assert changed.status_code == 409 and "already submitted with other values" in page
    fresh = _key(page)
    assert fresh != key and 'value="1"' in page  # the typed values stay
    assert web.post("/instances/new/", {**H100_2, "count": "1", "idempotency_key": fresh}).status_code == 302
    assert Instance.objects.filter(organization=owner.organization).count() == 2


def test_a_refused_create_does_not_use_up_the_key(web, owner, member_factory):
    broke = member_factory(role="owner")
    client = login_client(broke)
    key = _key(client.get("/instances/new/").content.decode())
    refused = client.post("/instances/new/", {**H100_2, "idempotency_key": key})
    assert refused.status_code == 402 and not Instance.objects.filter(organization=broke.organization).exists()
    assert not IdempotencyRecord.objects.filter(key=key).exists()
    funded(broke)  # topped up: the same form, sent again, creates
    assert client.post("/instances/new/", {**H100_2, "idempotency_key": key}).status_code == 302
    assert Instance.objects.filter(organization=broke.organization).count() == 1


def test_the_key_is_scoped_to_the_organization_and_user(web, owner, member_factory):
    other = funded(member_factory(role="owner"))
    key = "0" * 32
    assert web.post("/instances/new/", {**H100_2, "idempotency_key": key}).status_code == 302
    r = login_client(other).post("/instances/new/", {**H100_2, "idempotency_key": key})
    assert r.status_code == 302
    (theirs,) = Instance.objects.filter(organization=other.organization)
    assert r["Location"] == f"/instances/{theirs.pk}/"  # their own instance, not a replay of ours


def test_a_name_already_in_use_is_warned_about_but_not_refused(web, owner, member_factory):
    InstanceFactory(organization=owner.organization, name="train-1", state="running")
    InstanceFactory(organization=owner.organization, name="my-instance", state="terminated")
    stranger = member_factory(role="owner")
    InstanceFactory(organization=stranger.organization, name="secret-name", state="running")
    page = web.get("/instances/new/").content.decode()
    assert 'id="quote-name-warning"' not in page  # "my-instance" is terminated: free again
    quote = web.post("/instances/quote/", H100_2).content.decode()
    assert "already have an instance named <strong>train-1</strong> (running)" in quote
    assert 'id="quote-name-warning"' not in web.post("/instances/quote/", {**H100_2, "name": "secret-name"}).content.decode()
    assert web.post("/instances/new/", H100_2).status_code == 302  # a warning, not a block
    assert Instance.objects.filter(organization=owner.organization, name="train-1").count() == 2


def test_the_quote_says_what_is_available_and_why_not(web, owner, member_factory):
    assert "available: about" in web.post("/instances/quote/", H100_2).content.decode()
    unverified = member_factory(role="owner", user__email_verified_at=None)
    quote = login_client(unverified).post("/instances/quote/", H100_2).content.decode()
    assert 'id="quote-funds"' in quote and "¥0.00 available" in quote and "Verify your email first" in quote
    monthly = login_client(member_factory(role="owner")).post(
        "/instances/quote/", {**H100_2, "billing": "monthly"}).content.decode()
    assert "the whole 30-day package" in monthly and "Top up first." in monthly
    viewer = member_factory(role="member", org=member_factory(role="owner").organization)
    quote = login_client(viewer).post("/instances/quote/", H100_2).content.decode()
    assert "Ask a member who may top up" in quote and "/billing/topup/" not in quote
