"""The operators' tenancy admin: API tokens never show their hash and change only through the audited revoke;
trial claims are read-only; list pages do not query per row."""
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenancy.models import ApiToken, AuditEvent, TrialClaim
from tests.factories.tenancy import MembershipFactory, UserFactory, make_token

pytestmark = [pytest.mark.pg, pytest.mark.django_db]


@pytest.fixture
def operator_client():
    client = Client()
    client.user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(client.user)
    return client


def test_api_token_admin_hides_the_hash_and_revokes_only_through_the_service(operator_client):
    membership = MembershipFactory()
    token, _ = make_token(membership, scope="read")
    revoked, _ = make_token(membership, name="old", revoked_at=timezone.now())
    for url in ("/admin/tenancy/apitoken/", f"/admin/tenancy/apitoken/{token.pk}/change/"):
        body = operator_client.get(url).content.decode()
        assert token.prefix in body and token.token_hash not in body and "Token hash" not in body
    page = operator_client.get(f"/admin/tenancy/apitoken/{revoked.pk}/change/").content.decode()
    assert 'name="_save"' not in page and 'name="revoked_at' not in page and "deletelink" not in page
    # A form post cannot revive a revoked token, widen a read token, or delete one.
    assert operator_client.post(f"/admin/tenancy/apitoken/{revoked.pk}/change/",
                                {"name": "old", "scope": "write", "revoked_at_0": "", "revoked_at_1": ""}).status_code == 403
    assert operator_client.post(f"/admin/tenancy/apitoken/{token.pk}/change/",
                                {"name": "x", "scope": "write"}).status_code == 403
    assert operator_client.post(f"/admin/tenancy/apitoken/{token.pk}/delete/", {"post": "yes"}).status_code == 403
    assert operator_client.get("/admin/tenancy/apitoken/add/").status_code == 403
    assert ApiToken.objects.get(pk=revoked.pk).revoked_at is not None
    assert ApiToken.objects.get(pk=token.pk).scope == "read"
    # The action revokes through token_revoke: audited, once.
    response = operator_client.post("/admin/tenancy/apitoken/", {"action": "revoke",
                                                                 "_selected_action": [str(token.pk), str(revoked.pk)]})
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    events = AuditEvent.objects.filter(action="token.revoke")
    assert [(e.actor_id, e.target_id) for e in events] == [(operator_client.user.pk, str(token.pk))]


def test_trial_claims_are_read_only(operator_client):
    membership = MembershipFactory()
    TrialClaim.objects.create(email=membership.user.email, user=membership.user, organization=membership.organization)
    url = f"/admin/tenancy/trialclaim/{membership.user.email}/"
    assert operator_client.get(url + "change/").status_code == 200
    assert operator_client.post(url + "delete/", {"post": "yes"}).status_code == 403
    assert operator_client.post(url + "change/", {"email": "other@example.com"}).status_code == 403
    assert operator_client.get("/admin/tenancy/trialclaim/add/").status_code == 403
    assert TrialClaim.objects.filter(email=membership.user.email).exists()


@pytest.mark.parametrize("url", ["/admin/tenancy/trialclaim/", "/admin/tenancy/apitoken/"])
def test_tenancy_lists_do_not_query_per_row(operator_client, url):
    def add_rows(n):
        for _ in range(n):
            membership = MembershipFactory()
            TrialClaim.objects.create(email=membership.user.email, user=membership.user,
                                      organization=membership.organization)
            make_token(membership)

    add_rows(1)
    with CaptureQueriesContext(connection) as few:
        assert operator_client.get(url).status_code == 200
    add_rows(4)
    with CaptureQueriesContext(connection) as many:
        assert operator_client.get(url).status_code == 200
    assert len(many) == len(few)
