"""i18n: the whole signup → create instance journey in headless Chromium with a Chinese browser (Accept-Language
zh-CN), checked against the catalog: no English left on any page of it.

Every visible text (text nodes, the title, placeholders, titles, aria-labels) is cut into ASCII words; each word
must be one the zh-hans catalog's translations keep themselves (NVIDIA, SSH, GiB…), a word of the data the pages
show (accelerator, zone and image names, the user's name and email, the instance's name), or an identifier
(hex ids, slugs in code). A text that is an English msgid of the catalog is reported as untranslated."""
import re
import time
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from django.core import mail

from inventory.models import Accelerator, Image, Zone
from provisioning.models import Instance
from tenancy.models_realname import RealNameVerification
from tenancy.realname.services import realname_approve
from tests.e2e.conftest import Shots, ready_worker
from tests.factories.provisioning import make_fleet

pytestmark = [pytest.mark.redis, pytest.mark.browser, pytest.mark.worker,
              pytest.mark.django_db(transaction=True)]
CATALOG = Path(__file__).resolve().parents[2] / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
WORD = re.compile(r"[A-Za-z][A-Za-z]+")
# Identifiers and units no translation spells out (hex ids, the zone offset, per-second amounts' units).
IDENTIFIER = re.compile(r"[^\s（）()，：]*\d[^\s（）()，：]*"
                        r"|\S+@\S+|https?://\S+|UTC[+−-]\d+|\b[A-Z][a-z]+/[A-Z][A-Za-z_]+\b")
# Proper names: the product, what an instance runs (its image's HTTP ports), interconnects.
PROPER_NAMES = ("Cardmix", "JupyterLab", "TensorBoard", "HCCS", "PCIe")
VISIBLE_TEXTS = """() => {
  const skip = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "CODE", "PRE", "KBD", "SAMP"]);
  const page = document.documentElement.lang;
  // An element in another language on purpose (the switch's "English") is that language's own name.
  const foreign = (el) => el.closest("[lang]") && el.closest("[lang]").lang !== page;
  const out = [document.title];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    let el = node.parentElement, skipped = false;
    for (; el; el = el.parentElement) { if (skip.has(el.tagName)) { skipped = true; break; } }
    if (!skipped && !foreign(node.parentElement) && node.textContent.trim()) out.push(node.textContent.trim());
  }
  for (const el of document.querySelectorAll("[placeholder], [title], [aria-label], input[type=submit][value]")) {
    for (const attr of ["placeholder", "title", "aria-label"]) { if (el.getAttribute(attr)) out.push(el.getAttribute(attr)); }
    if (el.type === "submit" && el.value) out.push(el.value);
  }
  return out;
}"""


def _catalog():
    with CATALOG.open("rb") as fh:
        catalog = read_po(fh)
    kept, english = set(), {}
    for message in catalog:
        if message.id and message.string:
            msgid = message.id if isinstance(message.id, str) else message.id[0]
            msgstr = message.string if isinstance(message.string, str) else message.string[0]
            kept.update(WORD.findall(re.sub(r"%\(\w+\)[0-9]*[sd]", "", msgstr)))
            if msgstr != msgid:
                english[" ".join(msgid.split())] = msgstr
    return kept, english


def _data_words(*extra) -> set[str]:
    """What the pages show from the database and the user: names are data, not interface text."""
    texts = list(extra)
    texts += [f"{a.name} {a.vendor}" for a in Accelerator.objects.all()]
    texts += [f"{z.name} {z.slug} {z.fabric_label}" for z in Zone.objects.all()]
    texts += [f"{i.name} {i.slug}" for i in Image.objects.all()]
    return {w for text in texts for w in WORD.findall(text)}


def _english_left(page, allowed: set[str], english: dict) -> list[str]:
    left = []
    for text in page.evaluate(VISIBLE_TEXTS):
        flat = " ".join(text.split())
        if flat in english:
            left.append(f"untranslated: {flat!r}")
            continue
        words = [w for w in WORD.findall(IDENTIFIER.sub(" ", flat)) if w not in allowed]
        if words:
            left.append(f"{flat!r} (English: {', '.join(words)})")
    return left


def test_signup_to_instance_in_chinese_has_no_english_left(e2e_env, live_server, start_worker, browser):
    ready_worker(start_worker)
    make_fleet(h100=2, ascend=1)
    kept, english = _catalog()
    allowed = kept | _data_words("Ada Lovelace", "ada@example.com", "ada-run", *PROPER_NAMES)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    shot = Shots(page, "zh-journey")
    problems: dict[str, list[str]] = {}

    def check(name):
        shot(name)
        assert page.evaluate("document.documentElement.lang") == "zh-hans", name
        if left := _english_left(page, allowed, english):
            problems[f"{name} ({page.url})"] = left

    page.goto(f"{live_server.url}/")
    check("landing")
    page.goto(f"{live_server.url}/signup/")
    check("signup")
    page.click("button[type=submit]")  # empty: the form's errors, in Chinese
    check("signup-errors")
    page.fill("#id_name", "Ada")
    page.fill("#id_email", "ada@example.com")
    page.fill("#id_password1", "correct-horse-battery-9")
    page.click("button[type=submit]")
    page.wait_for_url("**/signup/check-email/")
    check("check-email")
    message = mail.outbox[-1]
    assert message.subject == "验证您的 Cardmix 邮箱" and "请确认您的邮箱" in message.body
    page.goto(live_server.url + re.search(r"/accounts/confirm-email/[^/\s]+/", message.body).group(0))
    check("verified")
    page.goto(f"{live_server.url}/dashboard/")
    assert page.inner_text("#balance-trial") == "¥10.00"
    check("dashboard")

    # A new organization is not real-name verified: the create page's banner links the verification page, where
    # Ada submits herself as an individual; the operator's approval (in the admin) is done in-process.
    page.goto(f"{live_server.url}/instances/new/")
    assert "需要实名认证" in page.inner_text("#realname-banner")
    check("new-instance-unverified")
    page.click("#realname-banner a")
    page.wait_for_url("**/account/verification/")
    check("verification")
    page.check("input[name=kind][value=individual]")
    page.fill("#id_legal_name", "Ada Lovelace")
    page.fill("#id_id_number", "11010519491231002X")
    page.click("#realname-form button[type=submit]")
    page.wait_for_selector("[data-realname-state=pending]")
    check("verification-pending")
    realname_approve(verification_id=RealNameVerification.objects.get(legal_name="Ada Lovelace").pk, actor=None)
    page.reload()
    page.wait_for_selector("[data-realname-state=verified]")
    check("verification-verified")

    page.goto(f"{live_server.url}/instances/new/")
    assert page.locator("#realname-banner").count() == 0
    check("new-instance")
    page.fill("#id_name", "ada-run")
    page.select_option("#id_accelerator", "h100-sxm-80g")
    page.fill("#id_count", "2")
    page.wait_for_selector("#quote-price[data-ucny='3800000']")
    check("quote")
    page.click("#create-submit")
    page.wait_for_url(re.compile(r".*/instances/[0-9a-f-]{36}/$"))
    check("instance-created")
    page.wait_for_selector("#instance-live[data-state=running]", timeout=90_000)
    page.wait_for_selector("#readiness .report.passed")
    time.sleep(1)
    check("instance-running")
    page.goto(f"{live_server.url}/instances/")
    check("instance-list")
    page.goto(f"{live_server.url}/billing/")
    check("billing")

    assert Instance.objects.get(name="ada-run").state == "running"
    assert not problems, "English left on the zh-hans journey (wrap it for translation and run `make messages`, " \
        "or add a data word):\n" + "\n".join(f"{where}:\n  " + "\n  ".join(left) for where, left in problems.items())


def test_the_switch_turns_a_page_chinese_and_back(e2e_env, live_server, browser, member_factory):
    from tests.e2e.conftest import session_cookie

    owner = member_factory(role="owner")
    context = browser.new_context(locale="en-US")
    context.add_cookies([session_cookie(owner, live_server)])
    page = context.new_page()
    page.goto(f"{live_server.url}/dashboard/")
    assert "Dashboard" in page.inner_text("header")
    page.click("#language-switch button[value=zh-hans]")
    page.wait_for_load_state()
    assert page.url.endswith("/dashboard/") and "概览" in page.inner_text("header")
    owner.user.refresh_from_db()
    assert owner.user.language == "zh-hans"
    page.click("#language-switch button[value=en]")
    page.wait_for_load_state()
    assert "Dashboard" in page.inner_text("header")
