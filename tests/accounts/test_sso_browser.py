"""SSO in headless Chromium: the console's login page → the loopback OpenID Connect provider's sign-in → back in
the console, in the organization bound to the person's email domain, with the role its owner chose."""
import pytest

from tenancy.models import Membership, User
from tenancy.sso import sso_binding_approve, sso_binding_create
from tests.e2e.conftest import Shots
from tests.factories.tenancy import UserFactory

from .conftest import PERSON

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sso_sign_in_lands_in_the_domains_organization(e2e_env, live_server, chromium, member_factory, idp_start):
    idp = idp_start(live_server.url)
    lab = member_factory(role="owner")
    lab.organization.name = "Testuni Vision Lab"
    lab.organization.save(update_fields=["name"])
    binding = sso_binding_create(actor_membership=lab, kind="email_domain", value="testuni.edu.cn", role="billing")
    sso_binding_approve(operator=UserFactory(is_staff=True), binding=binding)

    page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
    shot = Shots(page, "sso")
    page.goto(f"{live_server.url}/login/")
    page.click("a:has-text('Test University')")
    page.wait_for_load_state()
    shot("continue")
    page.locator("main form button[type=submit]").first.click()  # allauth asks before leaving for the IdP
    page.wait_for_url(lambda url: url.startswith(idp.url))
    shot("idp")
    page.fill("#id_username", PERSON["username"])
    page.fill("#id_password", PERSON["password"])
    page.click("#idp-login")
    page.wait_for_url(f"{live_server.url}/dashboard/")
    shot("dashboard")
    header = page.inner_text("header")
    assert PERSON["email"] in header and "Testuni Vision Lab" in header
    user = User.objects.get(email=PERSON["email"])
    assert user.email_verified_at is not None
    assert Membership.objects.get(organization=lab.organization, user=user).role == "billing"
