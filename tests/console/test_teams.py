"""Teams: invite by email with a signed link (the account is created on acceptance, the email goes through
the configured backend) and create an organization from the console."""
import re

import pytest
from django.core import mail
from django.test import Client

from tenancy.models import Membership, Organization, User
from tests.console.conftest import login_client
from tests.factories.tenancy import UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "correct-horse-battery-9"


@pytest.fixture(autouse=True)
def _send_on_commit(django_capture_on_commit_callbacks, monkeypatch):
    """The invitation email leaves on commit; these tests run inside one transaction, so run it at once."""
    from django.db import transaction

    monkeypatch.setattr(transaction, "on_commit", lambda fn, *a, **k: fn())


def _invite(client, email, role="member"):
    r = client.post("/account/members/invite/", {"email": email, "role": role})
    assert r.status_code == 302, r.content.decode()[:2000]
    message = mail.outbox[-1]
    assert message.to == [email]
    return re.search(r"https?://\S+(/invite/[^/\s]+/)", message.body).group(1)


def test_an_invited_address_without_an_account_creates_one_on_acceptance(member_factory, settings):
    settings.TRIAL_CREDIT_UCNY = 0
    owner = member_factory(role="owner")
    path = _invite(login_client(owner), "new.person@example.com")
    assert owner.organization.name in mail.outbox[-1].subject
    assert not User.objects.filter(email="new.person@example.com").exists()  # nothing before acceptance
    visitor = Client()
    page = visitor.get(path).content.decode()
    assert f"Join {owner.organization.name}" in page and 'id="accept-form"' in page
    r = visitor.post(path, {"name": "New Person", "password": PASSWORD})
    assert r.status_code == 302 and r["Location"] == "/dashboard/"
    user = User.objects.get(email="new.person@example.com")
    assert user.email_verified_at is not None and user.check_password(PASSWORD)
    assert Membership.objects.get(user=user, organization=owner.organization).role == "member"
    assert owner.organization.name in visitor.get("/account/members/").content.decode()  # it is the current org
    # The link is used: a second visitor cannot reuse it.
    again = Client().post(path, {"name": "Someone", "password": PASSWORD})
    assert "invalid, was already used or has expired" in again.content.decode()
    assert User.objects.filter(email="new.person@example.com").count() == 1


def test_an_existing_account_logs_in_to_accept_and_another_account_cannot(member_factory):
    owner = member_factory(role="owner")
    invitee = UserFactory(email="ada@example.com")
    path = _invite(login_client(owner), "ada@example.com", role="admin")
    assert "Log in to accept" in Client().get(path).content.decode()
    stranger = member_factory(role="owner")
    wrong = login_client(stranger)
    assert "Log out and open the link again" in wrong.get(path).content.decode()
    assert wrong.post(path).status_code == 400
    assert not Membership.objects.filter(organization=owner.organization, user=stranger.user).exists()
    right = Client()
    right.force_login(invitee)
    assert right.post(path).status_code == 302
    assert Membership.objects.get(user=invitee, organization=owner.organization).role == "admin"


def test_bad_links_roles_and_removals(member_factory):
    owner = member_factory(role="owner")
    admin = member_factory(role="admin", org=owner.organization)
    path = _invite(login_client(owner), "bob@example.com")
    assert Client().get(path[:-6] + "xxxxx/").status_code == 404  # tampered: 404, names nothing
    other = member_factory(role="owner").organization
    assert other.name not in Client().get(path[:-6] + "xxxxx/").content.decode()
    # A member may not invite; an admin may not invite an owner (the choice is absent and a forged POST refused).
    assert login_client(member_factory(role="member", org=owner.organization)).get(
        "/account/members/invite/").status_code == 404
    as_admin = login_client(admin)
    assert 'value="owner"' not in as_admin.get("/account/members/invite/").content.decode()
    sent = len(mail.outbox)
    assert as_admin.post("/account/members/invite/", {"email": "eve@example.com", "role": "owner"}).status_code == 400
    assert len(mail.outbox) == sent
    # An address invited, then removed: the old link no longer lets it back in.
    carol = UserFactory(email="carol@example.com")
    carol_path = _invite(login_client(owner), "carol@example.com")
    c = Client()
    c.force_login(carol)
    assert c.post(carol_path).status_code == 302
    membership = Membership.objects.get(user=carol, organization=owner.organization)
    login_client(owner).post(f"/account/members/{membership.pk}/remove/")
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert c.post(carol_path).status_code == 400
    assert not Membership.objects.filter(user=carol, organization=owner.organization).exists()


def test_an_inviter_removed_before_acceptance_voids_the_link(member_factory):
    owner = member_factory(role="owner")
    admin = member_factory(role="admin", org=owner.organization)
    path = _invite(login_client(admin), "dan@example.com")
    login_client(owner).post(f"/account/members/{admin.pk}/remove/")
    r = Client().post(path, {"name": "Dan", "password": PASSWORD})
    assert "invalid, was already used or has expired" in r.content.decode()
    assert not User.objects.filter(email="dan@example.com").exists()


def test_create_an_organization_from_the_console(member_factory):
    me = member_factory(role="member")
    web = login_client(me)
    assert 'href="/account/organizations/new/"' in web.get("/account/organizations/").content.decode()
    assert web.post("/account/organizations/new/", {"name": "  "}).status_code == 400
    r = web.post("/account/organizations/new/", {"name": "Vision Lab"})
    assert r.status_code == 302 and r["Location"] == "/account/members/"
    org = Organization.objects.get(name="Vision Lab")
    assert not org.is_personal and Membership.objects.get(organization=org, user=me.user).role == "owner"
    page = web.get("/account/members/").content.decode()
    assert "Members of Vision Lab" in page and 'href="/account/members/invite/"' in page
