"""Two-factor authentication through django-allauth: TOTP enrolment and login, recovery codes, and an
organization's rule that every member needs a second factor (console sent to enrolment, session API refused,
API tokens unaffected)."""
import pytest
from django.test import Client
from django.urls import reverse

from tenancy.models import AuditEvent
from tests.factories.tenancy import PASSWORD, login_client, make_token

from .conftest import totp_now

pytestmark = pytest.mark.django_db


def _password_login(client, user):
    return client.post(reverse("console:login"), {"username": user.email, "password": PASSWORD})


def _enrol_totp(client, user) -> str:
    """Through allauth's pages as a person does: confirm the password, scan the secret, type a code."""
    page = client.get(reverse("mfa_activate_totp"))
    assert page.status_code == 302 and page["Location"].startswith(reverse("account_reauthenticate"))
    confirmed = client.post(page["Location"], {"password": PASSWORD})
    assert confirmed.status_code == 302, confirmed.content[:500]
    page = client.get(reverse("mfa_activate_totp"))
    assert page.status_code == 200
    secret = page.context["form"].secret
    assert secret in page.content.decode()  # shown for typing into an app, beside the QR code
    wrong = client.post(reverse("mfa_activate_totp"), {"code": "000000" if totp_now(secret) != "000000" else "111111"})
    assert wrong.status_code == 200 and not user.authenticator_set.exists()
    done = client.post(reverse("mfa_activate_totp"), {"code": totp_now(secret)})
    assert done.status_code == 302
    return secret


def test_totp_enrolment_then_login_needs_the_code(member_factory):
    from allauth.mfa.models import Authenticator

    user = member_factory(role="owner").user
    client = Client()
    assert _password_login(client, user).status_code == 302
    secret = _enrol_totp(client, user)
    types = set(Authenticator.objects.filter(user=user).values_list("type", flat=True))
    assert types == {Authenticator.Type.TOTP, Authenticator.Type.RECOVERY_CODES}  # codes made with the first factor
    client.post(reverse("console:logout"))

    client = Client()
    step = _password_login(client, user)
    assert step.status_code == 302 and step["Location"] == reverse("mfa_authenticate")
    assert "_auth_user_id" not in client.session  # the password alone does not sign in
    assert client.get(reverse("console:dashboard")).status_code == 302
    bad = client.post(reverse("mfa_authenticate"), {"code": "123456" if totp_now(secret) != "123456" else "654321"})
    assert bad.status_code == 200 and "_auth_user_id" not in client.session
    ok = client.post(reverse("mfa_authenticate"), {"code": totp_now(secret)})
    assert ok.status_code == 302 and ok["Location"] == reverse("console:dashboard")
    assert client.session["_auth_user_id"] == str(user.pk)
    assert client.get(reverse("console:dashboard")).status_code == 200


def test_a_recovery_code_signs_in_once(member_factory):
    from allauth.mfa.models import Authenticator
    from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret

    user = member_factory(role="owner").user
    TOTP.activate(user, generate_totp_secret())
    from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes

    codes = RecoveryCodes.activate(user).get_unused_codes()
    assert len(codes) == 10
    client = Client()
    assert _password_login(client, user)["Location"] == reverse("mfa_authenticate")
    assert client.post(reverse("mfa_authenticate"), {"code": codes[0]}).status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)
    again = Client()
    _password_login(again, user)
    assert again.post(reverse("mfa_authenticate"), {"code": codes[0]}).status_code == 200  # used up
    assert "_auth_user_id" not in again.session
    rc = Authenticator.objects.get(user=user, type=Authenticator.Type.RECOVERY_CODES).wrap()
    assert codes[0] not in rc.get_unused_codes() and len(rc.get_unused_codes()) == 9


def test_lockout_still_counts_failures_before_the_second_factor(member_factory, settings):
    """django-axes sees the password step of an MFA account too."""
    from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret

    user = member_factory().user
    TOTP.activate(user, generate_totp_secret())
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(reverse("console:login"), {"username": user.email, "password": "wrong-password-1"})
    assert _password_login(client, user).status_code in (403, 429)


# --- An organization that requires MFA --------------------------------------------------------------

def test_owner_requires_mfa_and_members_without_it_are_sent_to_enrolment(member_factory):
    from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret

    owner = member_factory(role="owner")
    member = member_factory(role="member", org=owner.organization)
    owner_web = login_client(owner)
    page = owner_web.post(reverse("console:security"), {"mfa_required": "on"})
    assert page.status_code == 302
    event = AuditEvent.objects.get(action="organization.mfa_required_set")
    assert event.actor == owner.user and event.organization == owner.organization
    assert event.details == {"mfa_required": True}

    web = login_client(member)
    for name in ("console:dashboard", "console:instance_list", "console:members", "console:tokens"):
        r = web.get(reverse(name))
        assert r.status_code == 302 and r["Location"] == reverse("mfa_index"), name
    assert web.get(reverse("mfa_index")).status_code == 200  # enrolment itself is reachable
    assert web.get(reverse("mfa_activate_totp")).status_code == 200
    assert web.get(reverse("console:organizations")).status_code == 200  # and leaving for another organization
    api = web.get("/api/v1/organizations/current/")
    assert api.status_code == 403 and api.json()["error"]["code"] == "mfa_required"

    # API tokens stay token-only: the same member's token works without a second factor.
    _, secret = make_token(member, scope="read")
    token = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    got = token.get("/api/v1/organizations/current/")
    assert got.status_code == 200 and got.json()["mfa_required"] is True

    TOTP.activate(member.user, generate_totp_secret())
    assert web.get(reverse("console:dashboard")).status_code == 200
    assert web.get("/api/v1/organizations/current/").status_code == 200


def test_only_owners_change_the_rule(member_factory, token_client_for):
    owner = member_factory(role="owner")
    admin = member_factory(role="admin", org=owner.organization)
    assert login_client(admin).post(reverse("console:security"), {"mfa_required": "on"}).status_code == 403
    refused = token_client_for(admin).patch("/api/v1/organizations/current/", {"mfa_required": True}, format="json")
    assert refused.status_code == 403
    owner.organization.refresh_from_db()
    assert owner.organization.mfa_required is False
    assert not AuditEvent.objects.filter(action="organization.mfa_required_set").exists()
    ok = token_client_for(owner).patch("/api/v1/organizations/current/", {"mfa_required": True}, format="json")
    assert ok.status_code == 200 and ok.json()["mfa_required"] is True
    again = token_client_for(owner).patch("/api/v1/organizations/current/", {"mfa_required": True}, format="json")
    assert again.status_code == 200
    assert AuditEvent.objects.filter(action="organization.mfa_required_set").count() == 1  # no change, no row
    bad = token_client_for(owner).patch("/api/v1/organizations/current/", {"mfa_required": "maybe"}, format="json")
    assert bad.status_code == 400 and "mfa_required" in bad.json()["error"]["details"]


def test_a_rule_in_one_organization_does_not_follow_the_member_elsewhere(member_factory):
    strict = member_factory(role="owner")
    strict.organization.mfa_required = True
    strict.organization.save(update_fields=["mfa_required"])
    elsewhere = member_factory(role="owner")
    from tenancy.models import Membership

    second = Membership.objects.create(organization=elsewhere.organization, user=strict.user, role="member")
    assert login_client(second).get(reverse("console:dashboard")).status_code == 200
    assert login_client(strict).get(reverse("console:dashboard"))["Location"] == reverse("mfa_index")


def test_an_unverified_member_under_the_rule_can_confirm_the_address_allauth_wants_first(member_factory):
    """allauth adds no second factor while the account's address is unconfirmed; a member sent to enrolment can
    still ask for the link again and open it."""
    import re

    from allauth.account.models import EmailAddress
    from django.core import mail

    strict = member_factory(role="owner")
    strict.organization.mfa_required = True
    strict.organization.save(update_fields=["mfa_required"])
    user = strict.user
    user.email_verified_at = None
    user.save(update_fields=["email_verified_at"])
    EmailAddress.objects.create(user=user, email=user.email, primary=True, verified=False)  # as a sign-up leaves it
    web = login_client(strict)
    assert web.get(reverse("mfa_activate_totp"))["Location"] == reverse("mfa_index")  # allauth: confirm first
    assert web.post(reverse("console:check_email"))["Location"] == reverse("console:check_email")
    link = re.search(r"/accounts/confirm-email/\S+/", mail.outbox[-1].body).group(0)
    web.get(link)
    assert EmailAddress.objects.get(user=user).verified
    assert web.get(reverse("mfa_activate_totp")).status_code == 200


def test_security_page_shows_ones_own_status(member_factory):
    from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret

    m = member_factory(role="viewer")
    web = login_client(m)
    page = web.get(reverse("console:security")).content.decode()
    assert 'id="mfa-status"' in page and "Off:" in page and 'id="mfa-required-form"' not in page
    assert 'id="sso-bindings"' not in page  # viewers do not read the sign-in rules
    TOTP.activate(m.user, generate_totp_secret())
    assert "On:" in web.get(reverse("console:security")).content.decode()
