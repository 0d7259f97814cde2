"""Two-factor authentication in headless Chromium: TOTP enrolment and login with a code as an authenticator app
computes it, and a passkey on Chromium's virtual authenticator (CDP WebAuthn; http://localhost is a secure
context, so the live server will do)."""
import re

import pytest

from tests.e2e.conftest import Shots
from tests.factories.tenancy import PASSWORD

from .conftest import totp_now

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _base(live_server) -> str:
    # WebAuthn's relying party is a domain: the live server by the name localhost, never by its address.
    return re.sub(r"//127\.0\.0\.1:", "//localhost:", live_server.url)


def _password_login(page, base, user):
    page.goto(f"{base}/login/")
    page.fill("#id_username", user.email)
    page.fill("#id_password", PASSWORD)
    page.click("form[action='/login/'] button[type=submit]")


def _confirm_password_if_asked(page):
    if "/accounts/reauthenticate/" in page.url:
        page.fill("#id_password", PASSWORD)
        page.locator("main form button[type=submit]").first.click()


def test_totp_enrolment_and_login_with_a_code(e2e_env, live_server, chromium, member_factory):
    from allauth.mfa.models import Authenticator

    user = member_factory(role="owner").user
    base = _base(live_server)
    page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
    shot = Shots(page, "mfa-totp")
    _password_login(page, base, user)
    page.wait_for_url(f"{base}/dashboard/")
    page.click("text=Security")
    page.wait_for_url(f"{base}/account/security/")
    assert "Off:" in page.inner_text("#mfa-status")
    page.click("text=Manage two-factor authentication")
    page.wait_for_url(f"{base}/accounts/2fa/")
    shot("index")
    page.locator("a[href='/accounts/2fa/totp/activate/']").first.click()
    page.wait_for_load_state()
    _confirm_password_if_asked(page)
    page.wait_for_url(f"{base}/accounts/2fa/totp/activate/")
    secret = page.input_value("#authenticator_secret")
    assert re.fullmatch(r"[A-Z2-7]{32}", secret), secret
    shot("activate")
    page.fill("#id_code", totp_now(secret))
    page.locator("main form button[type=submit]").first.click()
    page.wait_for_url(lambda url: "/totp/activate/" not in url)
    assert Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()
    shot("activated")

    page.click("button:has-text('Log out')")
    page.wait_for_url(f"{base}/")
    _password_login(page, base, user)
    page.wait_for_url(f"{base}/accounts/2fa/authenticate/")
    shot("asks-for-code")
    page.fill("#id_code", totp_now(secret))
    page.locator("main form button[type=submit]").first.click()
    page.wait_for_url(f"{base}/dashboard/")
    assert user.email in page.inner_text("header")


def test_passkey_added_on_a_virtual_authenticator_then_signs_in_alone(e2e_env, live_server, chromium,
                                                                     member_factory):
    from allauth.mfa.models import Authenticator

    e2e_env.MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN = True  # http://localhost: a secure context, not https
    user = member_factory(role="owner").user
    base = _base(live_server)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
        "isUserVerified": True, "automaticPresenceSimulation": True}})["authenticatorId"]
    shot = Shots(page, "mfa-passkey")
    _password_login(page, base, user)
    page.wait_for_url(f"{base}/dashboard/")
    page.goto(f"{base}/accounts/2fa/webauthn/add/")
    _confirm_password_if_asked(page)
    page.wait_for_url(f"{base}/accounts/2fa/webauthn/add/")
    page.fill("#id_name", "laptop passkey")
    page.check("#id_passwordless")
    shot("add")
    page.click("#mfa_webauthn_add")
    page.wait_for_url(lambda url: "/webauthn/add/" not in url)
    key = Authenticator.objects.get(user=user, type=Authenticator.Type.WEBAUTHN)
    assert key.wrap().name == "laptop passkey" and key.wrap().is_passwordless
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]) == 1
    shot("added")

    page.click("button:has-text('Log out')")
    page.wait_for_url(f"{base}/")
    page.goto(f"{base}/login/")
    page.click("#passkey_login")  # no email, no password: the passkey alone
    page.wait_for_url(f"{base}/dashboard/")
    assert user.email in page.inner_text("header")
    shot("signed-in")

