"""The operators' tenancy admin: API tokens never show their hash and change only through the audited revoke;
trial claims are read-only; list pages do not query per row."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenancy.models import ApiToken, AuditEvent, Membership, TrialClaim
from tests.factories.tenancy import MembershipFactory, UserFactory, make_token

pytestmark = pytest.mark.django_db


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


def _org_post(org, **fields):
    """The organization's change form as the admin posts it (the read-only membership inline sends no rows)."""
    data = {"name": org.name, "slug": org.slug, "card_quota": org.card_quota,
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000"}
    if org.is_personal:
        data["is_personal"] = "on"
    data.update(fields)
    return data


def test_organization_page_cannot_edit_memberships_directly(operator_client):
    """Before: the inline edited memberships as plain rows — the last owner could be demoted or removed, a
    removed member kept live API tokens, and nothing was audited."""
    owner = MembershipFactory(role="owner")
    org = owner.organization
    member = MembershipFactory(organization=org, role="member")
    token, _ = make_token(member)
    url = f"/admin/tenancy/organization/{org.pk}/change/"
    page = operator_client.get(url).content.decode()
    assert owner.user.email in page and 'name="memberships-0-role"' not in page
    assert 'name="memberships-0-DELETE"' not in page
    operator_client.post(url, _org_post(org, **{
        "memberships-TOTAL_FORMS": "2", "memberships-INITIAL_FORMS": "2",
        "memberships-0-id": str(owner.pk), "memberships-0-organization": str(org.pk),
        "memberships-0-user": str(owner.user.pk), "memberships-0-role": "viewer",
        "memberships-1-id": str(member.pk), "memberships-1-organization": str(org.pk),
        "memberships-1-user": str(member.user.pk), "memberships-1-role": "member", "memberships-1-DELETE": "on"}))
    assert Membership.objects.get(pk=owner.pk).role == "owner"
    assert Membership.objects.filter(pk=member.pk).exists()
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


def test_operator_member_changes_go_through_the_member_services(operator_client):
    owner = MembershipFactory(role="owner")
    org = owner.organization
    member = MembershipFactory(organization=org, role="member")
    token, _ = make_token(member)
    ids = [str(owner.pk), str(member.pk)]
    # Removing asks for a reason first; the last owner stays, the member goes and their token is revoked.
    page = operator_client.post("/admin/tenancy/membership/", {"action": "remove_members", "_selected_action": ids})
    assert page.status_code == 200 and owner.user.email in page.content.decode()
    assert Membership.objects.filter(organization=org).count() == 2
    done = operator_client.post("/admin/tenancy/membership/", {"action": "remove_members", "_selected_action": ids,
                                                               "apply": "1", "reason": "support ticket 42"},
                                follow=True)
    body = done.content.decode()
    assert "last owner cannot be removed" in body and "1 membership(s) changed" in body
    assert list(Membership.objects.filter(organization=org).values_list("pk", flat=True)) == [owner.pk]
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    event = AuditEvent.objects.get(action="member.remove")
    assert (event.actor_id, event.organization_id, event.details["reason"]) == (
        operator_client.user.pk, org.pk, "support ticket 42")
    # The last owner cannot be demoted either.
    operator_client.post("/admin/tenancy/membership/", {"action": "change_role", "_selected_action": [str(owner.pk)],
                                                        "apply": "1", "role": "viewer", "reason": "x"})
    assert Membership.objects.get(pk=owner.pk).role == "owner"
    # Adding one names the organization; then the first owner may be demoted, audited.
    newcomer = UserFactory()
    response = operator_client.post("/admin/tenancy/organization/", {
        "action": "add_member", "_selected_action": [str(org.pk)], "apply": "1", "email": newcomer.email.upper(),
        "role": "owner", "reason": "ownership transfer"})
    assert response.status_code == 302
    assert Membership.objects.get(organization=org, user=newcomer).role == "owner"
    operator_client.post("/admin/tenancy/membership/", {"action": "change_role", "_selected_action": [str(owner.pk)],
                                                        "apply": "1", "role": "viewer", "reason": "transfer done"})
    assert Membership.objects.get(pk=owner.pk).role == "viewer"
    assert set(AuditEvent.objects.filter(actor=operator_client.user, organization=org).values_list(
        "action", "details__reason")) == {("member.remove", "support ticket 42"),
                                          ("member.invite", "ownership transfer"),
                                          ("member.role_change", "transfer done")}
    # Nothing is added, edited or deleted as a plain row.
    assert operator_client.get("/admin/tenancy/membership/add/").status_code == 403
    assert operator_client.post(f"/admin/tenancy/membership/{owner.pk}/delete/", {"post": "yes"}).status_code == 403


def test_quota_change_goes_through_organization_quota_set(operator_client):
    """Before: the admin saved the quota itself, past organization_quota_set and its row lock."""
    org = MembershipFactory().organization
    with CaptureQueriesContext(connection) as queries:
        response = operator_client.post(f"/admin/tenancy/organization/{org.pk}/change/", _org_post(org, card_quota="64"))
    assert response.status_code == 302
    locks = [q["sql"] for q in queries if "FOR NO KEY UPDATE" in q["sql"] and "tenancy_organization" in q["sql"]]
    assert locks, "the quota was saved without organization_quota_set's row lock"
    org.refresh_from_db()
    assert org.card_quota == 64
    event = AuditEvent.objects.get(action="organization.quota_set")
    assert (event.actor_id, event.details) == (operator_client.user.pk, {"old": 16, "new": 64})
    # A rename is audited too, and the quota is untouched by it.
    operator_client.post(f"/admin/tenancy/organization/{org.pk}/change/", _org_post(org, name="Renamed"))
    assert AuditEvent.objects.get(action="organization.update").details == {"name": {"old": org.name, "new": "Renamed"}}
    assert list(AuditEvent.objects.filter(action="organization.quota_set").values_list("details", flat=True)) == [{"old": 16, "new": 64}]


def test_users_are_deactivated_not_deleted_and_status_changes_are_audited(operator_client):
    """Before: deleting a user cascaded their memberships — an organization could lose its only owner, with no
    member.remove audit — and emptied the actor of their audit events."""
    owner = MembershipFactory(role="owner")
    user = owner.user
    assert operator_client.post(f"/admin/tenancy/user/{user.pk}/delete/", {"post": "yes"}).status_code == 403
    operator_client.post("/admin/tenancy/user/", {"action": "delete_selected", "post": "yes",
                                                  "_selected_action": [str(user.pk)]})
    assert Membership.objects.filter(pk=owner.pk).exists()
    response = operator_client.post(f"/admin/tenancy/user/{user.pk}/change/", {
        "email": user.email, "name": user.name, "is_staff": "", "is_superuser": "", "is_active": "",
        "email_verified_at_0": "", "email_verified_at_1": "", "date_joined_0": "2024-01-01",
        "date_joined_1": "00:00:00", "initial-date_joined_0": "2024-01-01", "initial-date_joined_1": "00:00:00"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    user.refresh_from_db()
    assert not user.is_active
    event = AuditEvent.objects.get(action="user.update")
    assert event.actor_id == operator_client.user.pk and "is_active" in event.details["changed"]


def test_a_view_only_operator_cannot_revoke_tokens_or_change_members(db):
    """Staff who may only view tokens and memberships see the lists but change nothing through their actions
    (the admin offers an action without allowed_permissions to anyone who can open the list). Before: the token
    list's Revoke action ran for a view-only operator and cut a customer's API token off."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    membership = MembershipFactory(role="member")
    MembershipFactory(organization=membership.organization, role="owner")
    token, _ = make_token(membership)
    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(
        content_type__app_label="tenancy", codename__in=["view_apitoken", "view_membership", "view_organization"]))
    client = Client()
    client.force_login(viewer)
    assert client.get("/admin/tenancy/apitoken/").status_code == 200
    client.post("/admin/tenancy/apitoken/", {"action": "revoke", "_selected_action": [str(token.pk)]})
    client.post("/admin/tenancy/membership/", {"action": "remove_members", "_selected_action": [str(membership.pk)],
                                               "apply": "1", "reason": "x"})
    client.post("/admin/tenancy/membership/", {"action": "change_role", "_selected_action": [str(membership.pk)],
                                               "apply": "1", "role": "owner", "reason": "x"})
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None
    assert Membership.objects.get(pk=membership.pk).role == "member"
    assert not AuditEvent.objects.filter(action__in=["token.revoke", "member.remove", "member.role_change"]).exists()


def test_an_organization_added_in_the_admin_starts_with_an_owner(operator_client):
    """Before: the add form had no owner — the new organization had no member at all, and nobody could manage it
    from the console. Now an owner email (an existing account) is required; they become owner through
    member_invite, audited with the organization's creation."""
    from tenancy.models import Organization

    owner = UserFactory(email="lab-head@example.com")
    form = {"name": "New Lab", "slug": "new-lab", "card_quota": "16", "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "0"}
    page = operator_client.get("/admin/tenancy/organization/add/").content.decode()
    assert 'name="owner_email"' in page
    for bad in ({}, {"owner_email": "nobody@example.com"}, {"owner_email": "not-an-email"}):
        response = operator_client.post("/admin/tenancy/organization/add/", {**form, **bad})
        assert response.status_code == 200 and 'class="errorlist' in response.content.decode(), bad
    assert not Organization.objects.filter(slug="new-lab").exists()
    response = operator_client.post("/admin/tenancy/organization/add/", {**form, "owner_email": " LAB-Head@Example.com"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    org = Organization.objects.get(slug="new-lab")
    assert list(Membership.objects.filter(organization=org).values_list("user", "role")) == [(owner.pk, "owner")]
    events = AuditEvent.objects.filter(organization=org, actor=operator_client.user)
    assert sorted(events.values_list("action", flat=True)) == ["member.invite", "organization.create"]
    assert events.get(action="member.invite").details["role"] == "owner"
    assert events.get(action="organization.create").details["owner"] == "lab-head@example.com"
    # The change page has no owner field (members change through the Memberships actions).
    assert 'name="owner_email"' not in operator_client.get(f"/admin/tenancy/organization/{org.pk}/change/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_an_organization_slug_taken_after_the_form_checked_it_is_a_form_error_and_saves_nothing(operator_client,
                                                                                               monkeypatch):
    """Another organization takes the slug between the form's validation and its save (its own unique check
    passed): organization_create refuses, and so does the edit's save. Before: both were a 500."""
    from tenancy.admin import OrganizationAdmin
    from tenancy.models import Organization
    from tests.factories.tenancy import OrganizationFactory
    from tests.races import meanwhile

    owner = UserFactory(email="lab-head@example.com")
    form = {"name": "New Lab", "slug": "new-lab", "card_quota": "16", "owner_email": owner.email,
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "0"}
    meanwhile(monkeypatch, OrganizationAdmin, "save_model",
              lambda: Organization.objects.create(name="Other", slug="new-lab"))
    response = operator_client.post("/admin/tenancy/organization/add/", form)
    page = response.content.decode()
    assert response.status_code == 200
    assert "An organization with this slug exists." in page and "The organization is invalid." in page
    assert 'value="New Lab"' in page  # the form again, as typed
    assert list(Organization.objects.filter(slug="new-lab").values_list("name", flat=True)) == ["Other"]
    assert not Membership.objects.filter(user=owner).exists()
    assert not AuditEvent.objects.filter(actor=operator_client.user).exists()

    org = OrganizationFactory(slug="lab-a", name="Lab A")
    meanwhile(monkeypatch, OrganizationAdmin, "save_model",
              lambda: Organization.objects.create(name="Other B", slug="lab-b"))
    response = operator_client.post(f"/admin/tenancy/organization/{org.pk}/change/",
                                    _org_post(org, slug="lab-b", name="Lab B", card_quota="64"))
    assert response.status_code == 200
    assert "An organization with this slug exists." in response.content.decode()
    org.refresh_from_db()
    assert (org.slug, org.name, org.card_quota) == ("lab-a", "Lab A", 16)  # the quota change was rolled back too
    assert not AuditEvent.objects.filter(actor=operator_client.user).exists()


def test_password_changes_and_user_creates_in_the_admin_are_audited_without_the_password(operator_client):
    """Before: an operator setting, changing or disabling a user's password on /admin/tenancy/user/<id>/password/
    (or creating a user with one) left no audit event."""
    user = UserFactory(email="ada@example.com")
    old_hash = user.password
    url = f"/admin/tenancy/user/{user.pk}/password/"
    assert operator_client.get(url).status_code == 200
    # A refused password (too short) changes nothing and audits nothing.
    response = operator_client.post(url, {"usable_password": "true", "password1": "short", "password2": "short"})
    assert response.status_code == 200
    assert not AuditEvent.objects.filter(action="user.password_set").exists()
    secret = "Correct-Horse-Battery-9"
    response = operator_client.post(url, {"usable_password": "true", "password1": secret, "password2": secret})
    assert response.status_code == 302, response.content.decode()[-2000:]
    user.refresh_from_db()
    assert user.password != old_hash and user.check_password(secret)
    event = AuditEvent.objects.get(action="user.password_set")
    assert (event.actor_id, event.target_id) == (operator_client.user.pk, str(user.pk))
    assert event.details == {"email": "ada@example.com", "usable_password": True}
    assert secret not in str(event.details) and user.password not in str(event.details)
    # Disabling password-based login is audited too.
    response = operator_client.post(url, {"usable_password": "false", "unset-password": "1"})
    assert response.status_code == 302
    user.refresh_from_db()
    assert not user.has_usable_password()
    assert list(AuditEvent.objects.filter(action="user.password_set").order_by("created_at")
                .values_list("details__usable_password", flat=True)) == [True, False]
    # An operator creating a user (with a password) is audited as well, the password nowhere in it.
    response = operator_client.post("/admin/tenancy/user/add/", {"email": "Grace@Example.com", "usable_password": "true",
                                                                "password1": secret, "password2": secret})
    assert response.status_code == 302, response.content.decode()[-2000:]
    created = AuditEvent.objects.get(action="user.create")
    assert created.actor_id == operator_client.user.pk and created.details == {"email": "grace@example.com"}
    assert not AuditEvent.objects.filter(details__icontains=secret).exists()
