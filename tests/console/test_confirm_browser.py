"""In headless Chromium: terminate, SSH-key delete, member removal and token revoke ask before acting, with
JavaScript (htmx's confirm dialog; cancelling sends nothing) and without it (a confirmation page whose Cancel goes
back)."""
import time

import pytest

from provisioning.models import Instance
from tenancy.models import ApiToken, Membership, SshKey
from tests.e2e.conftest import session_cookie
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import SshKeyFactory, make_token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
DELETE_LAPTOP = "tr:has-text('laptop') button:has-text('Delete')"


def _page(chromium, membership, live_server, *, javascript: bool):
    context = chromium.new_context(java_script_enabled=javascript)
    context.add_cookies([session_cookie(membership, live_server)])
    return context.new_page()


def _posts_to(page, path: str) -> list:
    sent = []
    page.on("request", lambda r: sent.append(r.method) if r.url.split("?")[0].endswith(path) else None)
    return sent


def test_terminate_without_javascript_goes_through_the_confirmation_page(e2e_env, live_server, chromium,
                                                                         member_factory):
    owner = member_factory(role="owner")
    inst = InstanceFactory(organization=owner.organization, state="running", name="gpu-box")
    page = _page(chromium, owner, live_server, javascript=False)
    detail = f"{live_server.url}/instances/{inst.pk}/"
    page.goto(detail)
    page.click("button[data-action=terminate]")
    page.wait_for_selector("#confirm", timeout=5_000)
    assert page.url.split("?")[0] == f"{detail}terminate/" and "Terminate gpu-box?" in page.inner_text("#confirm")
    assert Instance.objects.get(pk=inst.pk).state == "running"
    page.click("#confirm-cancel")
    page.wait_for_selector("#instance-live")
    assert page.url == detail and Instance.objects.get(pk=inst.pk).state == "running"
    page.click("button[data-action=terminate]")
    page.click("#confirm-submit")
    page.wait_for_selector(".messages .msg")
    assert page.url == detail and "Terminating…" in page.inner_text(".messages")
    assert Instance.objects.get(pk=inst.pk).state == "terminating"


def test_with_javascript_the_browser_asks_and_cancelling_sends_nothing(e2e_env, live_server, chromium,
                                                                       member_factory):
    owner = member_factory(role="owner")
    inst = InstanceFactory(organization=owner.organization, state="stopped", name="gpu-box")
    key = SshKeyFactory(user=owner.user, name="laptop")
    page = _page(chromium, owner, live_server, javascript=True)
    asked, answers = [], []
    page.on("dialog", lambda d: (asked.append(d.message), d.accept() if answers.pop(0) else d.dismiss()))

    page.goto(f"{live_server.url}/account/ssh-keys/")
    sent = _posts_to(page, f"/account/ssh-keys/{key.pk}/delete/")
    answers.append(False)
    page.click(DELETE_LAPTOP)
    time.sleep(0.5)  # a request would have left by now
    assert asked == ["Delete the SSH key laptop? Instances that already have it keep it."]
    assert sent == [] and page.url == f"{live_server.url}/account/ssh-keys/" and SshKey.objects.filter(pk=key.pk)
    answers.append(True)
    page.click(DELETE_LAPTOP)
    page.wait_for_selector(".messages .msg")  # htmx posted, then the list loaded again with its message
    assert sent == ["POST"] and "Deleted laptop." in page.inner_text(".messages")
    assert not SshKey.objects.filter(pk=key.pk).exists() and page.locator(DELETE_LAPTOP).count() == 0

    page.goto(f"{live_server.url}/instances/{inst.pk}/")
    sent = _posts_to(page, f"/instances/{inst.pk}/terminate/")
    answers.append(False)
    page.click("button[data-action=terminate]")
    time.sleep(0.5)
    assert asked[-1] == ("Terminate gpu-box? Its cards are released and its container deleted with its disk; "
                         "this cannot be undone.")
    assert sent == [] and Instance.objects.get(pk=inst.pk).state == "stopped"
    answers.append(True)
    page.click("button[data-action=terminate]")
    page.wait_for_selector("#instance-live[data-state=terminating]")
    assert sent == ["POST"] and page.url == f"{live_server.url}/instances/{inst.pk}/"  # swapped in place


def test_member_removal_and_token_revoke_ask_with_and_without_javascript(e2e_env, live_server, chromium,
                                                                         member_factory):
    owner = member_factory(role="owner")
    colleague = member_factory(role="member", org=owner.organization)
    token, _ = make_token(owner, name="ci")
    remove, revoke = f"button[data-remove-member='{colleague.pk}']", f"button[data-revoke-token='{token.pk}']"
    members, tokens = f"{live_server.url}/account/members/", f"{live_server.url}/account/tokens/"

    page = _page(chromium, owner, live_server, javascript=False)  # no JavaScript: a page asks, Cancel goes back
    for list_url, button, question in ((members, remove, f"Remove {colleague.user.email} from"),
                                       (tokens, revoke, "Revoke the token ci")):
        page.goto(list_url)
        page.click(button)
        page.wait_for_selector("#confirm", timeout=5_000)
        assert question in page.inner_text("#confirm")
        page.click("#confirm-cancel")
        page.wait_for_selector(button)
        assert page.url == list_url
    assert Membership.objects.filter(pk=colleague.pk).exists() and ApiToken.objects.get(pk=token.pk).revoked_at is None

    page = _page(chromium, owner, live_server, javascript=True)  # JavaScript: the browser asks, then htmx posts
    asked, answers = [], []
    page.on("dialog", lambda d: (asked.append(d.message), d.accept() if answers.pop(0) else d.dismiss()))
    for list_url, button, path in ((members, remove, f"/account/members/{colleague.pk}/remove/"),
                                   (tokens, revoke, f"/account/tokens/{token.pk}/revoke/")):
        page.goto(list_url)
        sent = _posts_to(page, path)
        answers.append(False)
        page.click(button)
        time.sleep(0.5)  # a request would have left by now
        assert sent == [] and page.url == list_url
        answers.append(True)
        page.click(button)
        page.wait_for_selector(".messages .msg")
        assert sent == ["POST"] and page.url == list_url and page.locator(button).count() == 0
    assert asked == [f"Remove {colleague.user.email} from {owner.organization.name}? Their API tokens in it are "
                     "revoked."] * 2 + [f"Revoke the token ci ({token.prefix}…)? Whatever uses it stops working."] * 2
    assert not Membership.objects.filter(pk=colleague.pk).exists()
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
