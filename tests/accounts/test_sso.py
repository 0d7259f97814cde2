"""OpenID Connect sign-in against a real provider on loopback (django-oauth-toolkit, tests/accounts/idp/), and the
SSO bindings owners ask for and operators approve."""
import re
from urllib.parse import urlsplit

import pytest
import requests
from django.test import Client
from django.urls import reverse

from tenancy.middleware import SESSION_ORG_KEY
from tenancy.models import AuditEvent, Membership, SsoBinding, User
from tenancy.sso import sso_binding_approve, sso_binding_create
from tests.factories.tenancy import UserFactory, login_client

from .conftest import PERSON, PROVIDER_ID

pytestmark = pytest.mark.django_db


def _approved(owner, *, kind="email_domain", value="testuni.edu.cn", role="viewer"):
    binding = sso_binding_create(actor_membership=owner, kind=kind, value=value, role=role)
    return sso_binding_approve(operator=UserFactory(is_staff=True), binding=binding)


def _sign_in_at_idp(client, idp, person=PERSON):
    """Cardmix → the provider's authorize URL → its login form → back to Cardmix's callback with a code."""
    start = client.post(reverse("openid_connect_login", kwargs={"provider_id": PROVIDER_ID}))
    assert start.status_code == 302 and start["Location"].startswith(f"{idp.server_url}/authorize/"), start
    browser = requests.Session()
    form = browser.get(start["Location"], timeout=30)  # → the IdP's login page
    assert form.status_code == 200 and "Test University" in form.text, form.text[:500]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    hop = browser.post(form.url, data={"csrfmiddlewaretoken": csrf, "username": person["username"],
                                       "password": person["password"]}, allow_redirects=False, timeout=30)
    assert hop.status_code == 302, hop.text[:500]
    back = browser.get(idp.url + hop.headers["Location"] if hop.headers["Location"].startswith("/")
                       else hop.headers["Location"], allow_redirects=False, timeout=30)
    assert back.status_code == 302, back.text[:500]
    callback = urlsplit(back.headers["Location"])
    assert callback.path == reverse("openid_connect_callback", kwargs={"provider_id": PROVIDER_ID})
    return client.get(f"{callback.path}?{callback.query}")  # Cardmix exchanges the code at the IdP


def test_first_sso_sign_in_creates_a_verified_account_in_the_bound_organization(idp, member_factory):
    from allauth.account.models import EmailAddress
    from allauth.socialaccount.models import SocialAccount

    lab = member_factory(role="owner")
    _approved(lab, value="testuni.edu.cn", role="viewer")  # a parent domain of lab.testuni.edu.cn
    other = member_factory(role="owner")
    sso_binding_create(actor_membership=other, kind="email_domain", value="lab.testuni.edu.cn", role="admin")  # unapproved

    client = Client()
    done = _sign_in_at_idp(client, idp)
    assert done.status_code == 302 and done["Location"] == reverse("console:dashboard"), done.content[:800]
    user = User.objects.get(email=PERSON["email"])
    assert client.session["_auth_user_id"] == str(user.pk)
    assert user.email_verified_at is not None and user.name == PERSON["name"]
    assert not user.has_usable_password()
    assert EmailAddress.objects.get(user=user).verified
    assert SocialAccount.objects.get(user=user).provider == PROVIDER_ID
    roles = dict(Membership.objects.filter(user=user).values_list("organization_id", "role"))
    assert roles[lab.organization_id] == "viewer"  # the role the owner chose
    assert other.organization_id not in roles  # an unapproved binding takes no one in
    assert len(roles) == 2  # and their own personal organization
    assert client.session[SESSION_ORG_KEY] == str(lab.organization_id)  # the session starts in the lab
    page = client.get(reverse("console:dashboard")).content.decode()
    assert lab.organization.name in page
    join = AuditEvent.objects.get(action="member.sso_join")
    assert join.organization == lab.organization and join.actor == user and join.details["role"] == "viewer"
    assert AuditEvent.objects.filter(action="trial.claim", actor=user).exists()  # verified: trial as for a link

    # The second sign-in is a login, not a second account or a second membership.
    client.post(reverse("console:logout"))
    again = Client()
    assert _sign_in_at_idp(again, idp)["Location"] == reverse("console:dashboard")
    assert User.objects.filter(email=PERSON["email"]).count() == 1
    assert AuditEvent.objects.filter(action="member.sso_join").count() == 1


def test_an_idp_binding_takes_in_everyone_from_that_provider(idp, member_factory):
    lab = member_factory(role="owner")
    _approved(lab, kind="idp", value=PROVIDER_ID, role="member")
    assert _sign_in_at_idp(Client(), idp).status_code == 302
    assert Membership.objects.get(organization=lab.organization, user__email=PERSON["email"]).role == "member"


def test_a_refused_email_domain_gets_no_account_through_sso(idp, settings):
    settings.REFUSED_EMAIL_DOMAINS = ["testuni.edu.cn"]
    refused = _sign_in_at_idp(Client(), idp)
    assert refused.status_code == 400
    assert "not accepted" in refused.content.decode()
    assert not User.objects.filter(email=PERSON["email"]).exists()


def test_an_existing_password_account_is_not_taken_over_by_an_idp(idp, member_factory):
    """SSO_EMAIL_AUTHENTICATION off (the default): the IdP's address matching an account signs nobody in."""
    existing = member_factory(role="owner")
    existing.user.email = PERSON["email"]
    existing.user.save(update_fields=["email"])
    client = Client()
    answer = _sign_in_at_idp(client, idp)
    assert "_auth_user_id" not in client.session
    assert answer.status_code in (200, 302)
    assert User.objects.filter(email=PERSON["email"]).count() == 1


def test_the_login_page_offers_the_configured_providers(idp):
    page = Client().get(reverse("console:login")).content.decode()
    assert "Test University" in page
    assert reverse("openid_connect_login", kwargs={"provider_id": PROVIDER_ID}) in page


# --- Bindings: owners ask, operators approve ------------------------------------------------------

def test_binding_rules(member_factory, token_client_for, idp):
    owner = member_factory(role="owner")
    api = token_client_for(owner)
    url = "/api/v1/organizations/current/sso-bindings/"
    made = api.post(url, {"kind": "email_domain", "value": "@Lab.Example.EDU.cn", "role": "member"}, format="json")
    assert made.status_code == 201, made.json()
    body = made.json()
    assert body["value"] == "lab.example.edu.cn" and body["approved"] is False and body["role"] == "member"
    assert AuditEvent.objects.get(action="sso_binding.create").details["value"] == "lab.example.edu.cn"
    for bad, field in ((
            {"kind": "email_domain", "value": "not a domain", "role": "member"}, "value"),
            ({"kind": "idp", "value": "nowhere", "role": "member"}, "value"),
            ({"kind": "email_domain", "value": "x.example.org", "role": "owner"}, "role"),
            ({"kind": "email_domain", "value": "lab.example.edu.cn", "role": "viewer"}, "value")):  # a duplicate
        refused = api.post(url, bad, format="json")
        assert refused.status_code == 400 and field in refused.json()["error"]["details"], (bad, refused.json())
    idp_binding = api.post(url, {"kind": "idp", "value": PROVIDER_ID}, format="json")
    assert idp_binding.status_code == 201 and idp_binding.json()["role"] == "member"
    assert [b["value"] for b in api.get(url).json()["results"]] == ["lab.example.edu.cn", PROVIDER_ID]

    # One approved binding per domain: a second organization's request for it cannot be approved too.
    rival = member_factory(role="owner")
    first = SsoBinding.objects.get(organization=owner.organization, value="lab.example.edu.cn")
    sso_binding_approve(operator=UserFactory(is_staff=True), binding=first)
    theirs = sso_binding_create(actor_membership=rival, kind="email_domain", value="lab.example.edu.cn", role="member")
    from core.errors import ServiceError

    with pytest.raises(ServiceError):
        sso_binding_approve(operator=UserFactory(is_staff=True), binding=theirs)
    with pytest.raises(ServiceError):  # customers do not approve
        sso_binding_approve(operator=owner.user, binding=theirs)
    theirs.refresh_from_db()
    assert theirs.approved_at is None

    gone = api.delete(f"{url}{first.pk}/")
    assert gone.status_code == 204 and not SsoBinding.objects.filter(pk=first.pk).exists()
    assert AuditEvent.objects.filter(action="sso_binding.delete").count() == 1


def test_admin_approves_bindings(member_factory, operator_client):
    owner = member_factory(role="owner")
    binding = sso_binding_create(actor_membership=owner, kind="email_domain", value="uni.example.edu.cn",
                                 role="member")
    changelist = reverse("admin:tenancy_ssobinding_changelist")
    assert operator_client.get(changelist).status_code == 200
    operator_client.post(changelist, {"action": "approve", "_selected_action": [str(binding.pk)]})
    binding.refresh_from_db()
    assert binding.approved_at is not None
    assert AuditEvent.objects.get(action="sso_binding.approve").organization == owner.organization


def test_console_security_page_for_owners(member_factory):
    owner = member_factory(role="owner")
    web = login_client(owner)
    page = web.post(reverse("console:security"), {"kind": "email_domain", "value": "lab.example.edu.cn",
                                                  "role": "billing"})
    assert page.status_code == 302
    binding = SsoBinding.objects.get(organization=owner.organization)
    assert binding.role == "billing"
    listed = web.get(reverse("console:security")).content.decode()
    assert "lab.example.edu.cn" in listed and "waiting for an operator" in listed
    bad = web.post(reverse("console:security"), {"kind": "email_domain", "value": "nope", "role": "member"})
    assert bad.status_code == 200 and "Enter a domain" in bad.content.decode()
    confirm = web.get(reverse("console:sso_binding_delete", args=[binding.pk]))
    assert confirm.status_code == 200
    assert web.post(reverse("console:sso_binding_delete", args=[binding.pk])).status_code == 302
    assert not SsoBinding.objects.filter(pk=binding.pk).exists()

    admin = member_factory(role="admin", org=owner.organization)
    kept = sso_binding_create(actor_membership=owner, kind="email_domain", value="b.example.edu.cn", role="member")
    admin_web = login_client(admin)
    assert "b.example.edu.cn" in admin_web.get(reverse("console:security")).content.decode()  # admins read
    assert admin_web.post(reverse("console:sso_binding_delete", args=[kept.pk])).status_code == 403
    assert admin_web.post(reverse("console:security"), {"kind": "email_domain", "value": "c.example.edu.cn",
                                                        "role": "member"}).status_code == 403
    assert SsoBinding.objects.filter(organization=owner.organization).count() == 1


def test_the_sso_step_may_post_to_the_provider_and_nowhere_else(idp):
    """CSP form-action covers the redirect after a form post: the "continue to your provider" page allows the
    configured IdP's origin; every other console page keeps form-action 'self'."""
    step = Client().get(reverse("openid_connect_login", kwargs={"provider_id": PROVIDER_ID}))
    assert step.status_code == 200
    form_action = next(d for d in step["Content-Security-Policy"].split("; ") if d.startswith("form-action"))
    assert form_action.split() == ["form-action", "'self'", idp.url]
    login = Client().get(reverse("console:login"))["Content-Security-Policy"]
    assert "form-action 'self';" in login and idp.url not in login
