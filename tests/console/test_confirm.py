"""Destructive console actions ask first: terminate, SSH-key delete, member removal and token revoke lead, without
JavaScript, to a confirmation page (GET asks, POST acts); with JavaScript htmx asks in the browser
(tests/console/test_confirm_browser.py)."""
import re

import pytest

from tenancy.models import ApiToken, Membership, SshKey
from tests.console.conftest import login_client
from tests.factories.provisioning import InstanceFactory
from tests.factories.tenancy import SshKeyFactory, make_token

pytestmark = pytest.mark.django_db


def _form_of(page: str, marker: str) -> str:
    """The opening tag of the <form> that holds `marker`."""
    return re.findall(r"<form\b[^>]*>", page[:page.index(marker)])[-1]


def test_terminate_without_javascript_asks_on_its_own_page(web, owner):
    inst = InstanceFactory(organization=owner.organization, state="running", name="gpu-box")
    url = f"/instances/{inst.pk}/terminate/"
    button = _form_of(web.get(f"/instances/{inst.pk}/").content.decode(), 'data-action="terminate"')
    assert 'method="get"' in button and f'action="{url}"' in button  # no JavaScript: the button opens a page
    assert f'hx-post="{url}"' in button and "hx-confirm=" in button  # JavaScript: htmx asks, then posts
    page = web.get(url)
    html = page.content.decode()
    assert page.status_code == 200 and "Terminate gpu-box?" in html
    assert f'<form method="post" action="{url}"' in html and 'id="confirm-submit"' in html
    assert f'<a class="button" href="/instances/{inst.pk}/" id="confirm-cancel">Cancel</a>' in html
    inst.refresh_from_db()
    assert inst.state == "running"  # asking changes nothing
    assert web.post(url).status_code == 302
    inst.refresh_from_db()
    assert inst.state == "terminating"
    assert web.get(url)["Location"] == f"/instances/{inst.pk}/"  # nothing left to ask


@pytest.mark.parametrize("kind, lost", [("container", "its container deleted with its disk: nothing on it is kept"),
                                        ("bare_metal", "their disks wiped: nothing on them is kept")])
def test_stop_asks_first_and_says_it_keeps_nothing(web, owner, kind, lost):
    """Before: Stop posted at once, though a stop deletes a container with its disk (and wipes bare metal)."""
    inst = InstanceFactory(organization=owner.organization, state="running", name="gpu-box", kind=kind)
    url = f"/instances/{inst.pk}/stop/"
    button = _form_of(web.get(f"/instances/{inst.pk}/").content.decode(), 'data-action="stop"')
    assert 'method="get"' in button and f'action="{url}"' in button and f'hx-post="{url}"' in button
    assert 'hx-confirm="Stop gpu-box? Its ' in button and lost in button
    html = web.get(url).content.decode()
    assert "Stop gpu-box?" in html and lost in html and "data disk" not in html
    assert f'<form method="post" action="{url}"' in html
    inst.refresh_from_db()
    assert inst.state == "running"  # asking changes nothing
    assert web.post(url).status_code == 302
    inst.refresh_from_db()
    assert inst.state == "stopping"
    assert web.get(url)["Location"] == f"/instances/{inst.pk}/"  # nothing left to ask
    viewer_theirs = InstanceFactory(state="running")
    assert web.get(f"/instances/{viewer_theirs.pk}/stop/").status_code == 404


def test_terminate_confirmation_keeps_the_rules_of_the_action(web, owner, member_factory):
    inst = InstanceFactory(organization=owner.organization, state="running")
    assert web.get(f"/instances/{inst.pk}/start/").status_code == 405  # only the destructive actions ask
    viewer = login_client(member_factory(role="viewer", org=owner.organization))
    assert viewer.get(f"/instances/{inst.pk}/terminate/").status_code == 403
    theirs = InstanceFactory(state="running")
    assert web.get(f"/instances/{theirs.pk}/terminate/").status_code == 404


def test_ssh_key_delete_without_javascript_asks_on_its_own_page(web, owner):
    key = SshKeyFactory(user=owner.user, name="laptop")
    url = f"/account/ssh-keys/{key.pk}/delete/"
    button = _form_of(web.get("/account/ssh-keys/").content.decode(), f'data-delete-key="{key.pk}"')
    assert 'method="get"' in button and f'action="{url}"' in button
    assert f'hx-post="{url}"' in button and 'hx-confirm="Delete the SSH key laptop?' in button
    html = web.get(url).content.decode()
    assert "Delete the SSH key laptop?" in html and key.fingerprint in html
    assert f'<form method="post" action="{url}"' in html
    assert '<a class="button" href="/account/ssh-keys/" id="confirm-cancel">Cancel</a>' in html
    assert SshKey.objects.filter(pk=key.pk).exists()
    done = web.post(url)
    assert done.status_code == 302 and done["Location"] == "/account/ssh-keys/"
    assert not SshKey.objects.filter(pk=key.pk).exists()


def test_ssh_key_delete_by_htmx_reloads_the_list_and_foreign_keys_are_404(web, owner, member_factory):
    key = SshKeyFactory(user=owner.user, name="laptop")
    done = web.post(f"/account/ssh-keys/{key.pk}/delete/", HTTP_HX_REQUEST="true")
    assert done.status_code == 200 and done["HX-Redirect"] == "/account/ssh-keys/"
    assert "Deleted laptop." in web.get("/account/ssh-keys/").content.decode()
    other = SshKeyFactory(user=member_factory(role="owner").user)
    assert web.get(f"/account/ssh-keys/{other.pk}/delete/").status_code == 404
    assert web.post(f"/account/ssh-keys/{other.pk}/delete/").status_code == 404
    assert SshKey.objects.filter(pk=other.pk).exists()


def test_member_removal_without_javascript_asks_on_its_own_page(web, owner, member_factory):
    colleague = member_factory(role="member", org=owner.organization)
    email, org_name = colleague.user.email, owner.organization.name
    url = f"/account/members/{colleague.pk}/remove/"
    button = _form_of(web.get("/account/members/").content.decode(), f'data-remove-member="{colleague.pk}"')
    assert 'method="get"' in button and f'action="{url}"' in button  # no JavaScript: the button opens a page
    assert f'hx-post="{url}"' in button and f'hx-confirm="Remove {email} from {org_name}?' in button
    html = web.get(url).content.decode()
    assert f"Remove {email} from {org_name}?" in html and "API tokens in it are revoked" in html
    assert f'<form method="post" action="{url}"' in html
    assert '<a class="button" href="/account/members/" id="confirm-cancel">Cancel</a>' in html
    assert Membership.objects.filter(pk=colleague.pk).exists()  # asking changes nothing
    done = web.post(url)
    assert done.status_code == 302 and done["Location"] == "/account/members/"
    assert not Membership.objects.filter(pk=colleague.pk).exists()


def test_member_removal_keeps_its_rules(web, owner, member_factory):
    org = owner.organization
    colleague = member_factory(role="member", org=org)
    done = web.post(f"/account/members/{colleague.pk}/remove/", HTTP_HX_REQUEST="true")
    assert done.status_code == 200 and done["HX-Redirect"] == "/account/members/"  # htmx: the list loads again
    assert not Membership.objects.filter(pk=colleague.pk).exists()
    theirs = member_factory(role="member")  # another organization's member: 404 either way
    assert web.get(f"/account/members/{theirs.pk}/remove/").status_code == 404
    assert web.post(f"/account/members/{theirs.pk}/remove/").status_code == 404
    # A role that cannot remove this member is not asked; its POST is still refused by the service.
    viewer, admin = member_factory(role="viewer", org=org), member_factory(role="admin", org=org)
    target = member_factory(role="member", org=org)
    assert login_client(viewer).get(f"/account/members/{target.pk}/remove/").status_code == 403
    assert login_client(admin).get(f"/account/members/{owner.pk}/remove/").status_code == 403  # owners only
    refused = login_client(admin).post(f"/account/members/{owner.pk}/remove/", follow=True)
    assert "Only owners may manage owners." in refused.content.decode()
    assert login_client(viewer).post(f"/account/members/{target.pk}/remove/").status_code == 302
    assert Membership.objects.filter(pk__in=[owner.pk, target.pk]).count() == 2


def test_token_revoke_without_javascript_asks_on_its_own_page(web, owner, member_factory):
    token, _ = make_token(owner, name="ci")
    url = f"/account/tokens/{token.pk}/revoke/"
    button = _form_of(web.get("/account/tokens/").content.decode(), f'data-revoke-token="{token.pk}"')
    assert 'method="get"' in button and f'action="{url}"' in button
    assert f'hx-post="{url}"' in button and f'hx-confirm="Revoke the token ci ({token.prefix}…)?' in button
    html = web.get(url).content.decode()
    assert f"Revoke the token ci ({token.prefix}…)?" in html and f'<form method="post" action="{url}"' in html
    assert '<a class="button" href="/account/tokens/" id="confirm-cancel">Cancel</a>' in html
    token.refresh_from_db()
    assert token.revoked_at is None  # asking changes nothing
    done = web.post(url)
    assert done.status_code == 302 and done["Location"] == "/account/tokens/"
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert web.get(url).status_code == 404  # revoked: nothing left to ask
    # htmx reloads the list; another member's token (same organization) and another organization's are 404.
    again, _ = make_token(owner, name="ci-2")
    done = web.post(f"/account/tokens/{again.pk}/revoke/", HTTP_HX_REQUEST="true")
    assert done.status_code == 200 and done["HX-Redirect"] == "/account/tokens/"
    for other in (make_token(member_factory(role="member", org=owner.organization))[0],
                  make_token(member_factory(role="owner"))[0]):
        assert web.get(f"/account/tokens/{other.pk}/revoke/").status_code == 404
        assert web.post(f"/account/tokens/{other.pk}/revoke/").status_code == 404
        assert ApiToken.objects.get(pk=other.pk).revoked_at is None
