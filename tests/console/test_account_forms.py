"""SSH keys, members and tokens pages: which part of a key is wrong, no controls on the sole owner,
read-only tokens by default with a validated expiry day and a Copy button, long names refused out loud, hybrid
item errors by accelerator and all of them."""
import base64
import re
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.utils import timezone

from console.service_text import for_people
from tenancy.models import ApiToken, SshKey
from tests.console.conftest import login_client
from tests.e2e.conftest import session_cookie
from tests.factories.tenancy import ed25519_public_key

pytestmark = pytest.mark.django_db


def _rsa_public_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def _key_error(web, public_key: str) -> str:
    page = web.post("/account/ssh-keys/", {"name": "laptop", "public_key": public_key}).content.decode()
    errors = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', page, re.S)
    return re.sub(r"<[^>]+>", " ", " ".join(errors))


def test_a_malformed_key_says_which_part_is_wrong(web, owner):
    rsa_line = _rsa_public_key()
    kind, body = rsa_line.split()[:2]
    # The body is not base64 (a character lost its way): the type is fine, the body is not.
    text = _key_error(web, f"{kind} {body[:40]}!{body[41:]} me@laptop")
    assert "The key body (the text after ssh-rsa) is not valid base64" in text and "unsupported" not in text, text
    # Valid base64 but cut short: a damaged ssh-rsa body, not an unsupported type.
    text = _key_error(web, f"{kind} {body[:200]} me@laptop")
    assert "ssh-rsa key body is damaged" in text and "not accepted" not in text, text
    # Base64 of something that is not a key.
    text = _key_error(web, f"{kind} {base64.b64encode(b'hello world, not a key').decode()}")
    assert "is not an SSH public key" in text, text
    # An ed25519 body under an ssh-rsa label.
    ed_body = ed25519_public_key().split()[1]
    text = _key_error(web, f"ssh-rsa {ed_body}")
    assert "The key type says ssh-rsa but its body is a ssh-ed25519 key" in text, text
    # A type that is not accepted says so, and only then.
    text = _key_error(web, f"ssh-dss {body}")
    assert "Key type ssh-dss is not accepted" in text, text
    assert not SshKey.objects.filter(user=owner.user).exists()
    assert web.post("/account/ssh-keys/", {"name": "laptop", "public_key": rsa_line}).status_code == 302


def test_a_name_over_100_characters_is_refused_out_loud_not_cut(web, owner):
    for url in ("/account/ssh-keys/", "/account/tokens/", "/instances/new/"):
        assert 'maxlength="100"' not in web.get(url).content.decode(), url  # the browser would cut a paste silently
    page = web.post("/account/ssh-keys/", {"name": "k" * 300, "public_key": ed25519_public_key()}).content.decode()
    assert "Ensure this value has at most 100 characters (it has 300)." in page
    assert not SshKey.objects.filter(user=owner.user).exists()
    page = web.post("/account/tokens/", {"name": "t" * 300, "scope": "read"}).content.decode()
    assert "Ensure this value has at most 100 characters (it has 300)." in page
    assert not ApiToken.objects.filter(user=owner.user).exists()


def test_the_sole_owner_gets_no_remove_or_role_controls(web, owner, member_factory):
    member = member_factory(role="member", org=owner.organization)
    page = web.get("/account/members/").content.decode()
    assert f'data-remove-member="{owner.pk}"' not in page and f'action="/account/members/{owner.pk}/"' not in page
    assert f'data-sole-owner="{owner.pk}"' in page and "The only owner" in page
    assert f'data-remove-member="{member.pk}"' in page  # the others keep theirs
    # The no-JavaScript confirmation page is not offered either: back to the list, saying why.
    r = web.get(f"/account/members/{owner.pk}/remove/", follow=True)
    assert "last owner cannot be removed" in r.content.decode() and r.redirect_chain[-1][0] == "/account/members/"
    # With a second owner both owners can be managed again.
    second = member_factory(role="owner", org=owner.organization)
    page = web.get("/account/members/").content.decode()
    assert f'data-remove-member="{owner.pk}"' in page and f'data-remove-member="{second.pk}"' in page
    assert "data-sole-owner" not in page
    # Another organization's member: 404, as before.
    stranger = member_factory(role="owner")
    assert web.get(f"/account/members/{stranger.pk}/remove/").status_code == 404


def test_tokens_default_to_read_and_take_a_validated_expiry_day(web, owner):
    page = web.get("/account/tokens/").content.decode()
    assert re.search(r'<option value="read" selected>', page) and not re.search(r'<option value="write" selected>',
                                                                                 page)
    assert re.search(r'<input type="date" name="expires_at"[^>]*min="\d{4}-\d{2}-\d{2}"', page)
    for typed, error in (("next tuesday", "Enter a valid date."),
                         (timezone.localdate().isoformat(), "Pick a day after today"),
                         ("2020-01-01", "Pick a day after today")):
        page = web.post("/account/tokens/", {"name": "ci", "scope": "read", "expires_at": typed}).content.decode()
        assert error in page, typed
    assert not ApiToken.objects.filter(user=owner.user).exists()
    created = web.post("/account/tokens/", {"name": "ci", "scope": "read", "expires_at": "2031-05-01"})
    assert created.status_code == 200
    token = ApiToken.objects.get(user=owner.user)
    assert token.expires_at == datetime(2031, 4, 30, 16, 0, tzinfo=UTC)  # 00:00 UTC+8 that day
    page = created.content.decode()
    secret = re.search(r'<code id="new-token-secret">(cmx_[^<]+)</code>', page).group(1)
    assert 'data-copy="#new-token-secret"' in page and "/static/js/console.js" in page
    assert token.prefix in secret


def test_item_errors_name_the_accelerator():
    names = ["NVIDIA H100 SXM 80GB", "Huawei Ascend 910B"]
    assert for_people("item 1: count must be an integer >= 1, got 0", items=names) == \
        "Huawei Ascend 910B: Count must be an integer >= 1, got 0."
    assert for_people("item 0: bare metal h100-sxm-80g takes whole nodes: count must be a multiple of 8",
                      items=names) == "Bare metal NVIDIA H100 SXM 80GB takes whole nodes: count must be a multiple of 8."
    assert for_people("item 1: x", items=2) == "Item 2: X."  # only a count: the old wording
    assert for_people("item 0: x", items=names[:1]) == "X."


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_copy_button_puts_the_new_token_on_the_clipboard(e2e_env, live_server, chromium, member_factory):
    owner = member_factory(role="owner")
    context = chromium.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    page.goto(f"{live_server.url}/account/tokens/")
    page.fill("input[name=name]", "ci")
    page.fill("input[name=expires_at]", (timezone.localdate() + timedelta(days=30)).isoformat())
    page.click("button:text-is('Create token')")
    page.wait_for_selector("#new-token-secret")
    secret = page.inner_text("#new-token-secret")
    # The label says "Copied" for 1.5 s: watched from before the click, so a slow machine cannot miss it.
    page.evaluate("""() => { const button = document.querySelector('#copy-token'); window.labels = [];
        new MutationObserver(() => window.labels.push(button.textContent))
            .observe(button, {childList: true, characterData: true, subtree: true}); }""")
    page.click("#copy-token")
    page.wait_for_function("() => window.labels.includes('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == secret and secret.startswith("cmx_")
    assert ApiToken.objects.get(user=owner.user).scope == "read"
    assert login_client(owner).get("/account/tokens/").status_code == 200
