"""Sign-up and verification (allauth's, behind /signup/), trial once per email ever, org switching, the audit log,
members rules, query counts."""
import re

import pytest
from allauth.account.models import EmailAddress
from django.core import mail, signing
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tenancy import services
from tenancy.middleware import SESSION_ORG_KEY
from tenancy.models import AuditEvent, Membership, TrialClaim, User
from tests.factories.tenancy import SshKeyFactory, UserFactory, ed25519_public_key, make_token

from .conftest import assert_error

pytestmark = pytest.mark.django_db
PASSWORD = "plum-tangerine-river-42"


def _signup(client, email, name="Ada"):
    # The trial is granted on commit: run the callbacks inside these rolled-back tests.
    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(reverse("console:signup"), {"email": email, "name": name, "password1": PASSWORD},
                           REMOTE_ADDR="203.0.113.7", HTTP_USER_AGENT="pytest-browser")


def _verify_link_from_mail() -> str:
    match = re.search(r"https?://[^/\s]+(/accounts/confirm-email/\S+/)", mail.outbox[-1].body)
    assert match, mail.outbox[-1].body
    return match.group(1)


def _click(client, link, **extra):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.get(link, **extra)


def test_signup_verify_grants_trial_once_and_refuses_recased_duplicate(client, trial_calls):
    response = _signup(client, "  Ada@Example.COM ")
    assert response.status_code == 302 and response["Location"] == reverse("console:check_email")
    user = User.objects.get(email="ada@example.com")
    membership = Membership.objects.select_related("organization").get(user=user)
    assert membership.role == "owner" and membership.organization.is_personal
    assert user.email_verified_at is None and trial_calls == []
    assert client.get(reverse("console:dashboard")).status_code == 200  # signed in before verifying
    assert mail.outbox[-1].to == ["ada@example.com"] and mail.outbox[-1].subject == "Verify your Cardmix email address"
    link = _verify_link_from_mail()
    assert _click(client, link)["Location"] == reverse("console:dashboard")
    user.refresh_from_db()
    assert user.email_verified_at is not None
    assert trial_calls == [(membership.organization_id, "ada@example.com")]
    again = _click(client, link)  # clicking again is harmless: the link is spent, the page says it is verified
    assert again.status_code == 200 and "ada@example.com is verified" in again.content.decode()
    assert len(trial_calls) == 1
    # A second sign-up with the same address in other case is refused.
    client.logout()
    refused = _signup(client, "ADA@example.com")
    assert refused.status_code == 200 and "already exists" in refused.content.decode()
    assert User.objects.filter(email__iexact="ada@example.com").count() == 1
    # Deleting the account and signing up again never earns a second trial.
    user.delete()
    assert _signup(client, "ada@EXAMPLE.com").status_code == 302
    assert _click(client, _verify_link_from_mail()).status_code == 302
    assert User.objects.get(email="ada@example.com").email_verified_at is not None
    assert len(trial_calls) == 1
    assert TrialClaim.objects.filter(email="ada@example.com").count() == 1


def test_look_alike_domain_is_the_same_address_and_earns_no_second_trial(client, trial_calls):
    assert _signup(client, "ada@example.com").status_code == 302
    assert _click(client, _verify_link_from_mail()).status_code == 302
    client.logout()
    # A full-width "ｅ" and a soft hyphen: mail to either reaches ada@example.com.
    for look_alike in ("ada@\uff45xample.com", "ada@exam\u00adple.com", "ADA@EXAMPLE.COM"):
        refused = _signup(client, look_alike)
        assert refused.status_code == 200 and "already exists" in refused.content.decode(), look_alike
    assert _signup(client, "\uff41da@example.com").status_code == 200  # a full-width local part: not valid
    assert list(User.objects.values_list("email", flat=True)) == ["ada@example.com"]
    assert len(trial_calls) == 1


def test_login_ignores_the_case_of_the_email(client, member_factory):
    from tests.factories.tenancy import PASSWORD as FACTORY_PASSWORD

    user = member_factory().user
    response = client.post(reverse("console:login"), {"username": f"  {user.email.upper()} ",
                                                      "password": FACTORY_PASSWORD})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert client.get("/api/v1/organizations/current/").status_code == 200


def test_admin_add_user_with_recased_email_is_a_form_error(admin_client):
    UserFactory(email="dup@example.com")
    url = reverse("admin:tenancy_user_add")
    response = admin_client.post(url, {"email": "DUP@Example.com ", "password1": PASSWORD, "password2": PASSWORD,
                                       "usable_password": "true"})
    assert response.status_code == 200 and "already exists" in response.content.decode()
    assert User.objects.filter(email__iexact="dup@example.com").count() == 1
    created = admin_client.post(url, {"email": "New@Example.com", "password1": PASSWORD, "password2": PASSWORD,
                                      "usable_password": "true"})
    assert created.status_code == 302
    assert User.objects.filter(email="new@example.com").exists()


def test_forged_verification_link_and_refused_domain(client, trial_calls, settings):
    assert client.get(reverse("console:verify_email", args=["forged:token"])).status_code == 400
    assert _signup(client, "ada@example.com").status_code == 302
    address = EmailAddress.objects.get(email="ada@example.com")
    forged = signing.dumps(obj=address.pk, salt="forged")  # the right row, not allauth's signature
    page = _click(client, reverse("account_confirm_email", args=[forged]))
    assert page.status_code == 200 and "invalid or has expired" in page.content.decode()
    assert User.objects.get(email="ada@example.com").email_verified_at is None and trial_calls == []
    client.logout()
    mail.outbox.clear()
    settings.REFUSED_EMAIL_DOMAINS = ["mailinator.com"]
    response = _signup(client, "x@sub.Mailinator.com")
    assert response.status_code == 200 and "not accepted" in response.content.decode()
    assert list(User.objects.values_list("email", flat=True)) == ["ada@example.com"] and trial_calls == []
    assert mail.outbox == []


def test_a_link_mailed_before_allauth_still_verifies_once(client, trial_calls):
    """/verify-email/<token>/ links (tenancy/verification.py's old signed token, valid three days) hand over to
    allauth's confirmation: verified, the trial granted once; a link naming an address the account no longer has
    is refused."""
    from tenancy.verification import SALT

    user = services.user_signup(email="old@example.com", password=PASSWORD)
    token = signing.dumps({"u": str(user.pk), "e": user.email}, salt=SALT, compress=True)
    landing = _click(client, reverse("console:verify_email", args=[token]), follow=True)
    assert landing.redirect_chain[0][0].startswith("/accounts/confirm-email/")
    user.refresh_from_db()
    assert user.email_verified_at is not None and len(trial_calls) == 1
    assert _click(client, reverse("console:verify_email", args=[token]), follow=True).status_code == 200
    assert len(trial_calls) == 1
    stale = signing.dumps({"u": str(user.pk), "e": "before@example.com"}, salt=SALT, compress=True)
    assert client.get(reverse("console:verify_email", args=[stale])).status_code == 400


def test_check_email_sends_a_fresh_link_that_verifies(client, trial_calls):
    assert _signup(client, "late@example.com").status_code == 302
    mail.outbox.clear()
    assert client.post(reverse("console:check_email")).status_code == 302
    (resent,) = mail.outbox
    assert resent.to == ["late@example.com"]
    _click(client, _verify_link_from_mail())
    assert User.objects.get(email="late@example.com").email_verified_at is not None and len(trial_calls) == 1
    page = client.get(reverse("console:check_email")).content.decode()
    assert "Email verified" in page
    mail.outbox.clear()
    client.post(reverse("console:check_email"))  # verified: nothing more to send
    assert mail.outbox == []


def test_signed_in_people_are_sent_from_signup_to_the_dashboard(client, member_factory):
    client.force_login(member_factory().user)
    assert client.get(reverse("console:signup"))["Location"] == reverse("console:dashboard")
    assert client.get(reverse("account_signup"))["Location"] == reverse("console:signup")


def test_weak_password_refused_with_details(client):
    response = client.post(reverse("console:signup"), {"email": "b@example.com", "password1": "123"})
    assert response.status_code == 200 and "too short" in response.content.decode()
    assert not User.objects.exists()


def test_signup_throttled_per_ip(client, settings, monkeypatch):
    from tenancy.throttles import SignupRateThrottle

    monkeypatch.setattr(SignupRateThrottle, "THROTTLE_RATES", {"signup": "2/hour"})
    assert _signup(client, "a1@example.com").status_code == 302
    client.logout()
    assert _signup(client, "a2@example.com").status_code == 302
    client.logout()
    assert _signup(client, "a3@example.com").status_code == 429
    assert not User.objects.filter(email="a3@example.com").exists()


def test_audit_log_records_every_action_with_actor_and_ip(client, trial_calls, member_factory):
    assert _signup(client, "eve@example.com").status_code == 302
    assert _click(client, _verify_link_from_mail(), REMOTE_ADDR="203.0.113.7").status_code == 302
    eve = User.objects.get(email="eve@example.com")
    personal = Membership.objects.get(user=eve)
    other = member_factory(role="owner")
    Membership.objects.create(organization=other.organization, user=eve, role="admin")
    ip = {"REMOTE_ADDR": "203.0.113.7"}
    client.post(reverse("console:organization_switch"), {"organization": str(other.organization_id)}, **ip)
    assert client.session[SESSION_ORG_KEY] == str(other.organization_id)
    client.post(reverse("console:organization_switch"), {"organization": str(personal.organization_id)}, **ip)
    client.post(reverse("console:tokens"), {"name": "ci", "scope": "write"}, **ip)
    token = eve.api_tokens.get()
    client.post(reverse("console:token_revoke", args=[token.pk]), **ip)
    client.post(reverse("console:ssh_keys"), {"name": "k", "public_key": ed25519_public_key()}, **ip)
    key = eve.ssh_keys.get()
    client.post(reverse("console:ssh_key_delete", args=[key.pk]), **ip)
    friend = UserFactory()
    client.post(reverse("console:members"), {"email": friend.email, "role": "member"}, **ip)
    friend_m = Membership.objects.get(user=friend)
    client.post(reverse("console:member_update", args=[friend_m.pk]), {"role": "viewer"}, **ip)
    client.post(reverse("console:member_remove", args=[friend_m.pk]), **ip)
    events = list(AuditEvent.objects.filter(actor=eve).order_by("created_at"))
    actions = [e.action for e in events]
    for action in ["user.signup", "user.verify_email", "trial.claim", "organization.switch", "token.create",
                   "token.revoke", "ssh_key.add", "ssh_key.delete", "member.invite", "member.role_change",
                   "member.remove"]:
        assert action in actions, (action, actions)
    assert all(e.ip == "203.0.113.7" for e in events), [(e.action, e.ip) for e in events]
    assert actions.count("organization.switch") == 2
    # Owners read it through the API, newest first; the other org's switch event is not in the personal org's log.
    api = AuditEvent.objects.filter(organization=personal.organization).order_by("-created_at")
    session = client.get("/api/v1/audit-events/").json()
    assert [r["id"] for r in session["results"]] == [str(e.pk) for e in api]
    assert session["results"][0]["actor_email"] == "eve@example.com"


def test_quota_change_in_admin_is_audited(admin_client, member_factory):
    org = member_factory().organization
    url = reverse("admin:tenancy_organization_change", args=[org.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    services.organization_quota_set(org=org, card_quota=64, actor=User.objects.get(is_staff=True))
    org.refresh_from_db()
    assert org.card_quota == 64
    event = AuditEvent.objects.get(action="organization.quota_set")
    assert event.details == {"old": 16, "new": 64}


def test_member_rules(member_factory, token_client_for):
    owner = member_factory(role="owner")
    org = owner.organization
    admin = member_factory(role="admin", org=org)
    as_owner, as_admin = token_client_for(owner), token_client_for(admin)
    url = "/api/v1/organizations/current/members/{}/"
    # The last owner can be neither demoted nor removed.
    assert_error(as_owner.patch(url.format(owner.pk), {"role": "admin"}, format="json"), 409, "invalid_state")
    assert_error(as_owner.delete(url.format(owner.pk)), 409, "invalid_state")
    # Admins cannot touch owners or make owners.
    assert_error(as_admin.patch(url.format(owner.pk), {"role": "member"}, format="json"), 403, "permission_denied")
    assert_error(as_admin.delete(url.format(owner.pk)), 403, "permission_denied")
    assert_error(as_admin.patch(url.format(admin.pk), {"role": "owner"}, format="json"), 403, "permission_denied")
    newcomer = UserFactory()
    assert_error(as_admin.post("/api/v1/organizations/current/members/", {"email": newcomer.email, "role": "owner"}, format="json"), 403, "permission_denied")
    # Inviting: unknown email, bad role, duplicates → 400 with details.
    members_url = "/api/v1/organizations/current/members/"
    err = assert_error(as_owner.post(members_url, {"email": "nobody@example.com"}, format="json"), 400,
                       "validation_error")
    assert "email" in err["details"]
    err = assert_error(as_owner.post(members_url, {"email": newcomer.email, "role": "god"}, format="json"), 400,
                       "validation_error")
    assert "role" in err["details"]
    assert as_owner.post(members_url, {"email": newcomer.email.upper(), "role": "owner"}, format="json").status_code == 201
    assert_error(as_owner.post(members_url, {"email": newcomer.email}, format="json"), 400, "validation_error")
    # With two owners one can be demoted; then the remaining one is the last again.
    new_owner = Membership.objects.get(user=newcomer, organization=org)
    assert as_owner.patch(url.format(new_owner.pk), {"role": "member"}, format="json").json()["role"] == "member"
    assert_error(as_owner.patch(url.format(owner.pk), {"role": "viewer"}, format="json"), 409, "invalid_state")


LISTS = ["/api/v1/organizations/current/members/", "/api/v1/tokens/", "/api/v1/ssh-keys/", "/api/v1/audit-events/"]


def _fill(owner, n):
    for _ in range(n):
        m = Membership.objects.create(organization=owner.organization, user=UserFactory(), role="member")
        make_token(owner)
        SshKeyFactory(user=owner.user)
        AuditEvent.objects.create(organization=owner.organization, actor=m.user, action="test.event")


@pytest.mark.parametrize("url", LISTS)
def test_list_query_count_does_not_grow(url, member_factory, token_client_for):
    counts = []
    for n in (2, 50):
        owner = member_factory(role="owner")
        _fill(owner, n)
        client = token_client_for(owner)
        client.get(url)  # the first call records last_used_at
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200 and response.json()["count"] >= n
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1], counts
