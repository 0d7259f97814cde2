"""The organization export: a ZIP that opens, whose CSVs match what the API answers, for owners and admins only,
with nothing of another organization in it."""
import csv
import io
import zipfile

import pytest

from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import SshKeyFactory, login_client, make_token

pytestmark = pytest.mark.django_db
URL = "/api/v1/organizations/current/export/"


def _all(client, path):
    rows, url = [], f"{path}?limit=100"
    while url:
        body = client.get(url).json()
        rows += body["results"]
        url = body.get("next")
    return rows


def _rows(z, name):
    return list(csv.DictReader(io.StringIO(z.read(name).decode())))


@pytest.fixture
def world(member_factory):
    owner = member_factory(role="owner")
    org = owner.organization
    member = member_factory(role="member", org=org)
    fund(org, 250_000_000, key=f"export:{org.pk}")
    made = [InstanceFactory(organization=org, creator=owner.user, state=s, name=f"exp-{s}")
            for s in ("running", "stopped", "terminated")]
    SshKeyFactory(user=member.user, name="laptop")
    make_token(owner, name="ci")
    other = member_factory(role="owner")
    InstanceFactory(organization=other.organization, name="other-org-secret-instance")
    fund(other.organization, 1_000_000, key=f"export-other:{other.pk}")
    return owner, member, made


def test_the_zip_opens_and_its_csvs_match_the_api(world, token_client_for):
    owner, member, made = world
    client = token_client_for(owner)
    api_instances = _all(client, "/api/v1/instances/")
    api_transfers = _all(client, "/api/v1/billing/transfers/")
    api_audit = _all(client, "/api/v1/audit-events/")
    months = [m["month"] for m in _all(client, "/api/v1/billing/statements/")]
    r = client.get(URL)
    assert r.status_code == 200 and r["Content-Type"] == "application/zip"
    assert r["Content-Disposition"] == f'attachment; filename="cardmix-export-{owner.organization.slug}.zip"'
    z = zipfile.ZipFile(io.BytesIO(r.content))
    assert z.testzip() is None
    assert "other-org-secret-instance" not in b"".join(z.read(n) for n in z.namelist()).decode()

    instances = _rows(z, "instances.csv")
    assert sorted(r["id"] for r in instances) == sorted(i["id"] for i in api_instances) == sorted(
        str(i.pk) for i in made)
    by_id = {i["id"]: i for i in api_instances}
    for row in instances:
        api = by_id[row["id"]]
        for field in ("name", "kind", "state", "price_per_hour", "created_at"):
            assert row[field] == str(api[field]), (field, row[field], api[field])

    transfers = _rows(z, "transfers.csv")
    assert len(transfers) == len(api_transfers) > 0
    for row, api in zip(transfers, api_transfers, strict=True):
        assert row == {k: ("" if v is None else str(v)) for k, v in api.items()}

    audit = {r["id"]: r for r in _rows(z, "audit_events.csv")}
    for event in api_audit:
        assert audit[event["id"]]["action"] == event["action"]
        assert audit[event["id"]]["actor_email"] == (event["actor_email"] or "")

    assert months and [n for n in z.namelist() if n.startswith("statements/")] == [
        f"statements/{m}.csv" for m in months]
    for month in months:
        assert z.read(f"statements/{month}.csv") == client.get(f"/api/v1/billing/statements/{month}.csv").content

    keys = _rows(z, "ssh_keys.csv")
    assert [(k["user_email"], k["name"]) for k in keys] == [(member.user.email, "laptop")]
    assert keys[0]["fingerprint"].startswith("SHA256:")
    tokens = _rows(z, "api_tokens.csv")
    assert {t["name"] for t in tokens} >= {"ci"} and "token_hash" not in tokens[0]
    assert all(not any(v.startswith("cmx_") and len(v) > 20 for v in t.values()) for t in tokens)
    members = {m["email"]: m["role"] for m in _rows(z, "members.csv")}
    assert members == {owner.user.email: "owner", member.user.email: "member"}
    assert AuditEvent.objects.filter(organization=owner.organization, action="organization.export").count() == 1


@pytest.mark.parametrize("role", ["member", "billing", "viewer"])
def test_only_owners_and_admins_export(world, member_factory, token_client_for, role):
    owner, *_ = world
    someone = member_factory(role=role, org=owner.organization)
    r = token_client_for(someone).get(URL)
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"


def test_the_console_button_downloads_the_same_zip(world):
    owner, member, _ = world
    web = login_client(owner)
    assert 'id="organization-export"' in web.get("/account/organizations/").content.decode()
    r = web.get("/account/export/")
    assert r.status_code == 200 and zipfile.ZipFile(io.BytesIO(r.content)).read("members.csv")
    assert login_client(member).get("/account/export/").status_code == 404
