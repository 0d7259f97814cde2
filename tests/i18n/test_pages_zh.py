"""i18n: the console's other pages, rendered for a Chinese browser, leave no English word that is not data, an
identifier or a proper name (the same rule as the Chromium journey, on the server's HTML)."""
from html.parser import HTMLParser

import pytest
from django.test import Client

from tests.factories.provisioning import funded, make_fleet
from tests.factories.tenancy import ed25519_public_key, login_client, make_token
from tests.i18n.test_zh_journey_browser import IDENTIFIER, PROPER_NAMES, WORD, _catalog, _data_words

pytestmark = pytest.mark.django_db
ANONYMOUS = {"/", "/login/", "/signup/", "/password-reset/", "/accounts/password/reset/done/",
             "/accounts/password/reset/key/done/"}
PAGES = ["/", "/login/", "/signup/", "/password-reset/", "/accounts/password/reset/done/",
         "/accounts/password/reset/key/done/", "/dashboard/",
         "/account/organizations/", "/account/organizations/new/", "/account/members/", "/account/members/invite/",
         "/account/tokens/", "/account/ssh-keys/", "/webhooks/", "/instances/", "/instances/new/", "/storage/",
         "/billing/", "/billing/topup/", "/billing/statements/", "/billing/sponsorships/", "/billing/invoices/",
         "/billing/fapiao/", "/account/verification/", "/account/delete/", "/account/security/", "/images/"]
SKIP = {"script", "style", "code", "pre", "kbd", "samp", "template"}
ATTRS = {"placeholder", "title", "aria-label", "hx-confirm", "alt"}


class Texts(HTMLParser):
    """Visible texts and the attributes people read, outside code and outside elements in another language."""

    def __init__(self, lang):
        super().__init__(convert_charrefs=True)
        self.lang, self.stack, self.texts = lang, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        foreign = bool(attrs.get("lang")) and attrs["lang"] != self.lang and tag != "html"
        if tag not in ("br", "input", "img", "meta", "link", "hr", "source", "col", "wbr"):
            self.stack.append((tag, foreign))
        if not self._skipped() and not foreign:
            self.texts += [v for k, v in attrs.items() if k in ATTRS and v]

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def _skipped(self):
        return any(tag in SKIP or foreign for tag, foreign in self.stack)

    def handle_data(self, data):
        if data.strip() and not self._skipped():
            self.texts.append(" ".join(data.split()))


def test_console_pages_in_chinese_leave_no_english(member_factory):
    make_fleet(h100=1, ascend=1)
    owner = funded(member_factory(role="owner"))
    owner.user.name = "Ada"
    owner.user.save()
    token, _ = make_token(owner, name="ci-token")
    from tenancy.services import ssh_key_add

    ssh_key_add(user=owner.user, name="laptop", public_key=ed25519_public_key())
    web = login_client(owner)
    kept, english = _catalog()
    # The token's display prefix is random data (cmx_ and letters, sometimes without a digit to mark it an id).
    allowed = kept | _data_words("Ada", owner.user.email, owner.organization.name, "ci-token", "laptop",
                                 token.prefix.replace("_", " "), *PROPER_NAMES)
    problems = []
    anonymous = Client()
    for url in PAGES:
        client = anonymous if url in ANONYMOUS else web
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-CN")
        assert response.status_code == 200, url
        parser = Texts("zh-hans")
        parser.feed(response.content.decode())
        for text in parser.texts:
            if text in english:
                problems.append(f"{url}: untranslated {text!r}")
                continue
            words = [w for w in WORD.findall(IDENTIFIER.sub(" ", text)) if w not in allowed]
            if words:
                problems.append(f"{url}: {text!r} (English: {', '.join(words)})")
    assert not problems, "English left on zh-hans pages (wrap it and run `make messages`):\n" + "\n".join(problems)
