"""Console account pages: render, forms with CSRF, secrets shown once, key upload, password reset (allauth's),
login."""
import re

import pytest
from django.core import mail
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tenancy.models import ApiToken, AuditEvent, SshKey
from tests.factories.tenancy import PASSWORD, ed25519_public_key

pytestmark = pytest.mark.django_db
PAGES = ["console:organizations", "console:members", "console:tokens", "console:ssh_keys", "console:check_email"]


@pytest.mark.parametrize("name", PAGES)
def test_pages_render_with_csrf_and_need_login(name, client, member_factory):
    assert client.get(reverse(name)).status_code == 302  # to login
    client.force_login(member_factory(role="owner").user)
    response = client.get(reverse(name))
    assert response.status_code == 200
    if name != "console:check_email":
        assert "csrfmiddlewaretoken" in response.content.decode()


@pytest.mark.parametrize("name", ["console:signup", "console:login", "console:password_reset"])
def test_public_pages_render(name, client):
    response = client.get(reverse(name))
    assert response.status_code == 200 and "csrfmiddlewaretoken" in response.content.decode()


def test_forms_refuse_posts_without_csrf(member_factory):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(member_factory().user)
    assert strict.post(reverse("console:tokens"), {"name": "x", "scope": "write"}).status_code == 403
    assert not ApiToken.objects.exists()


def test_token_secret_shown_once(client, member_factory):
    client.force_login(member_factory(role="viewer").user)
    response = client.post(reverse("console:tokens"), {"name": "laptop", "scope": "read"})
    secret = re.search(r"cmx_[A-Za-z0-9_-]{43}", response.content.decode()).group(0)
    assert response["Cache-Control"] == "no-store"
    assert secret not in client.get(reverse("console:tokens")).content.decode()
    assert ApiToken.objects.get().prefix == secret[:12]


def test_ssh_key_upload_and_refusal_shown(client, member_factory):
    client.force_login(member_factory(role="member").user)
    upload = SimpleUploadedFile("id_ed25519.pub", ed25519_public_key().encode())
    assert client.post(reverse("console:ssh_keys"), {"name": "file", "key_file": upload}).status_code == 302
    assert SshKey.objects.count() == 1
    response = client.post(reverse("console:ssh_keys"), {"name": "bad", "public_key": "ssh-rsa nope"})
    assert response.status_code == 200 and "(the text after ssh-rsa) is not an SSH public key" in response.content.decode()


@pytest.mark.parametrize("role", ["viewer", "billing"])
def test_roles_without_ssh_key_rights_cannot_delete_or_add_keys_in_console(client, member_factory, role):
    membership = member_factory(role=role)
    key = SshKey.objects.create(user=membership.user, name="mine", key_type="ssh-ed25519",
                                public_key=ed25519_public_key(), fingerprint="SHA256:x")
    client.force_login(membership.user)
    page = client.get(reverse("console:ssh_keys")).content.decode()
    assert "mine" in page and "Add a key" not in page and "Delete</button>" not in page
    assert client.post(reverse("console:ssh_key_delete", args=[key.pk])).status_code == 302
    assert SshKey.objects.filter(pk=key.pk).exists()
    upload = SimpleUploadedFile("id_ed25519.pub", ed25519_public_key().encode())
    client.post(reverse("console:ssh_keys"), {"name": "file", "key_file": upload})
    assert SshKey.objects.count() == 1


def test_uploaded_key_with_a_nul_byte_is_refused_not_a_500(client, member_factory):
    client.force_login(member_factory(role="member").user)
    upload = SimpleUploadedFile("id_ed25519.pub", ed25519_public_key("bad\x00comment").encode())
    response = client.post(reverse("console:ssh_keys"), {"name": "file", "key_file": upload})
    assert response.status_code == 200 and "control characters" in response.content.decode()
    assert not SshKey.objects.exists()


def test_admin_sees_no_controls_on_owner_rows_and_cannot_offer_owner(client, member_factory):
    admin = member_factory(role="admin")
    owner = member_factory(role="owner", org=admin.organization)
    member = member_factory(role="member", org=admin.organization)
    client.force_login(admin.user)
    page = client.get(reverse("console:members")).content.decode()
    assert reverse("console:member_update", args=[owner.pk]) not in page
    assert reverse("console:member_update", args=[member.pk]) in page
    assert 'value="owner"' not in page
    table = page[page.index("<table"):]  # the header shows the signed-in user too
    assert table.index(owner.user.email) < table.index(admin.user.email) < table.index(member.user.email)
    client.force_login(owner.user)
    as_owner = client.get(reverse("console:members")).content.decode()
    assert reverse("console:member_update", args=[admin.pk]) in as_owner and 'value="owner"' in as_owner


def test_viewer_cannot_manage_members_in_console(client, member_factory):
    viewer = member_factory(role="viewer")
    client.force_login(viewer.user)
    page = client.get(reverse("console:members")).content.decode()
    assert "Add a member" not in page
    response = client.post(reverse("console:member_remove", args=[viewer.pk]))
    assert response.status_code == 302
    viewer.refresh_from_db()  # still there


def test_last_owner_removing_themself_stays_on_members_with_the_error(client, member_factory):
    owner = member_factory(role="owner")
    client.force_login(owner.user)
    response = client.post(reverse("console:member_remove", args=[owner.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("console:members")
    assert "last owner" in response.content.decode()
    owner.refresh_from_db()


def test_password_reset_flow(client, member_factory, settings):
    """allauth's reset behind /password-reset/: the link at SITE_URL (never the Host header), usable once."""
    settings.SITE_URL = "https://console.cardmix.example"
    settings.ALLOWED_HOSTS = ["*"]
    user = member_factory().user
    sent = client.post(reverse("console:password_reset"), {"email": user.email}, HTTP_HOST="evil.example")
    assert sent["Location"] == reverse("account_reset_password_done")
    assert mail.outbox[-1].subject == "Reset your Cardmix password"
    assert "https://console.cardmix.example/accounts/password/reset/key/" in mail.outbox[-1].body
    assert "evil.example" not in mail.outbox[-1].body
    link = re.search(r"https?://[^/\s]+(/accounts/password/reset/key/\S+/)", mail.outbox[-1].body).group(1)
    form_page = client.get(link, follow=True)
    assert form_page.status_code == 200 and 'name="password1"' in form_page.content.decode()
    new = "a-brand-new-password-77"
    response = client.post(form_page.redirect_chain[-1][0], {"password1": new, "password2": new})
    assert response["Location"] == reverse("account_reset_password_from_key_done")
    user.refresh_from_db()
    assert user.check_password(new)
    event = AuditEvent.objects.get(action="user.password_reset")
    assert event.actor == user and event.target_id == str(user.pk) and event.organization is not None
    spent = client.get(link, follow=True)  # the token hashed the old password: used once
    assert "invalid or was already used" in spent.content.decode()
    wrong = client.get(link[:link.rindex("-")] + "-0wrongtoken0/", follow=True)  # another token for the same user
    assert "invalid or was already used" in wrong.content.decode()
    assert AuditEvent.objects.filter(action="user.password_reset").count() == 1


def test_unknown_or_passwordless_address_gets_no_reset_mail_and_the_reset_is_throttled(client, monkeypatch,
                                                                                     member_factory):
    from tenancy.throttles import SignupRateThrottle

    response = client.post(reverse("console:password_reset"), {"email": "nobody@example.com"})
    assert response["Location"] == reverse("account_reset_password_done") and mail.outbox == []  # no enumeration
    sso_user = member_factory().user
    sso_user.set_unusable_password()  # an SSO account: it signs in through its IdP
    sso_user.save()
    client.post(reverse("console:password_reset"), {"email": sso_user.email})
    assert mail.outbox == []
    monkeypatch.setattr(SignupRateThrottle, "THROTTLE_RATES", {"signup": "1/hour"})
    from tests.cachekeys import cache_clear_own

    cache_clear_own()
    client.post(reverse("console:password_reset"), {"email": "nobody@example.com"})
    assert client.post(reverse("console:password_reset"), {"email": "nobody@example.com"}).status_code == 429


def test_a_reset_link_mailed_before_allauth_still_resets(client, member_factory):
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    user = member_factory().user
    old = reverse("console:password_reset_confirm", args=[urlsafe_base64_encode(force_bytes(user.pk)),
                                                          default_token_generator.make_token(user)])
    form_page = client.get(old, follow=True)
    assert 'name="password1"' in form_page.content.decode()
    new = "another-new-password-78"
    client.post(form_page.redirect_chain[-1][0], {"password1": new, "password2": new})
    user.refresh_from_db()
    assert user.check_password(new)
    assert "invalid" in client.get(reverse("console:password_reset_confirm", args=["bm9uZQ", "x-y"]),
                                   follow=True).content.decode()
    for old_page, new_name in (("password_reset_done", "account_reset_password_done"),
                               ("password_reset_complete", "account_reset_password_from_key_done")):
        assert client.get(reverse(f"console:{old_page}"))["Location"] == reverse(new_name)


def test_login_counts_failures_with_axes_and_is_throttled(client, member_factory, monkeypatch):
    user = member_factory().user
    url = reverse("console:login")
    assert client.post(url, {"username": user.email, "password": PASSWORD}).status_code == 302
    client.logout()
    from axes.models import AccessAttempt

    client.post(url, {"username": user.email, "password": "wrong"})
    assert AccessAttempt.objects.filter(failures_since_start__gte=1).exists()  # axes saw it
    from tenancy.throttles import LoginRateThrottle

    monkeypatch.setattr(LoginRateThrottle, "THROTTLE_RATES", {"login": "1/hour"})
    from tests.cachekeys import cache_clear_own

    cache_clear_own()
    client.post(url, {"username": user.email, "password": "wrong"})
    assert client.post(url, {"username": user.email, "password": PASSWORD}).status_code == 429
