"""i18n: which language a page and an API error speak — the user's setting, then the switch's cookie, then
Accept-Language, then English — and the header's switch that sets it."""
import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation

from tenancy.models import User
from tests.factories.tenancy import login_client, make_token

pytestmark = pytest.mark.django_db


def _lang(response) -> str:
    return response.headers.get("Content-Language", "")


def test_anonymous_follows_accept_language_then_english():
    client = Client()
    assert _lang(client.get("/login/")) == "en"
    page = client.get("/login/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.8")
    assert _lang(page) == "zh-hans" and '<html lang="zh-hans">' in page.content.decode()
    assert "登录" in page.content.decode()
    assert _lang(client.get("/login/", HTTP_ACCEPT_LANGUAGE="fr-FR,fr;q=0.9")) == "en"  # no French: English


def test_the_users_setting_wins_over_accept_language(member_factory):
    membership = member_factory(role="owner")
    web = login_client(membership)
    assert _lang(web.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="zh-CN")) == "zh-hans"  # no setting: the browser's
    User.objects.filter(pk=membership.user_id).update(language="en")
    page = web.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert _lang(page) == "en" and "Dashboard" in page.content.decode()
    User.objects.filter(pk=membership.user_id).update(language="zh-hans")
    page = web.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="en-US")
    assert _lang(page) == "zh-hans" and "概览" in page.content.decode()


def test_the_switch_sets_the_cookie_and_the_logged_in_users_setting(member_factory):
    membership = member_factory(role="owner")
    web = login_client(membership)
    web.handler.enforce_csrf_checks = True
    assert web.post("/language/", {"language": "zh-hans", "next": "/dashboard/"}).status_code == 403  # no token
    web.handler.enforce_csrf_checks = False
    response = web.post("/language/", {"language": "zh-hans", "next": "/dashboard/"})
    assert response.status_code == 302 and response["Location"] == "/dashboard/"
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    assert User.objects.get(pk=membership.user_id).language == "zh-hans"
    # Another browser (no cookie, English Accept-Language) gets the setting.
    assert _lang(login_client(membership).get("/dashboard/", HTTP_ACCEPT_LANGUAGE="en")) == "zh-hans"
    # An unknown code changes nothing.
    web.post("/language/", {"language": "xx", "next": "/dashboard/"})
    assert User.objects.get(pk=membership.user_id).language == "zh-hans"
    assert web.get("/language/").status_code == 405


def test_anonymous_switch_sets_only_the_cookie():
    client = Client()
    response = client.post("/language/", {"language": "zh-hans", "next": "/login/"})
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    assert _lang(client.get("/login/", HTTP_ACCEPT_LANGUAGE="en")) == "zh-hans"  # the cookie beats the header


def test_the_header_shows_the_switch_to_the_other_language():
    page = Client().get("/login/").content.decode()
    assert 'id="language-switch"' in page and 'value="zh-hans"' in page and "简体中文" in page
    page = Client().get("/login/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert 'value="en"' in page and ">English<" in page


def test_signup_remembers_the_page_language_for_later_emails():
    Client().post("/signup/", {"name": "Ada", "email": "ada@example.com", "password1": "correct-horse-battery-9"},
                  HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert User.objects.get(email="ada@example.com").language == "zh-hans"


def test_api_error_message_follows_accept_language_and_the_code_stays_english(member_factory, api_client):
    membership = member_factory(role="owner")
    _, secret = make_token(membership)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    en = api_client.get("/api/v1/no-such-thing/").json()["error"]
    zh = api_client.get("/api/v1/no-such-thing/", HTTP_ACCEPT_LANGUAGE="zh-CN").json()["error"]
    assert en["code"] == zh["code"] == "not_found"
    assert en["message"] == "No such API endpoint." and zh["message"] == "没有这个 API 端点。"
    bad = api_client.post("/api/v1/instances/", {"items": "nope"}, format="json", HTTP_ACCEPT_LANGUAGE="zh-CN")
    body = bad.json()["error"]
    assert bad.status_code == 400 and body["code"] == "validation_error" and body["message"] == "请求无效。"
    anon = Client().get("/api/v1/instances/", HTTP_ACCEPT_LANGUAGE="zh-CN").json()["error"]
    assert anon["code"] == "not_authenticated" and "身份" in anon["message"]  # DRF's own catalog


def test_an_api_tokens_user_setting_wins_over_accept_language(member_factory, api_client):
    """Bearer requests are authenticated by DRF, after the middleware that applies the user's setting: the token's
    user's language is applied there, then the request's Accept-Language, as for the console."""
    membership = member_factory(role="owner")
    _, secret = make_token(membership)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    forged = "/api/v1/instances/?cursor=forged"
    membership.user.language = "zh-hans"
    membership.user.save(update_fields=["language"])
    chinese = api_client.get(forged)
    assert _lang(chinese) == "zh-hans"
    assert chinese.json()["error"]["details"]["cursor"] == [
        "不是此列表的游标：请按原样使用 next 或 previous 链接。"]
    membership.user.language = "en"
    membership.user.save(update_fields=["language"])
    english = api_client.get(forged, HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert _lang(english) == "en" and english.json()["error"]["details"]["cursor"][0].startswith("Not a cursor")
    membership.user.language = ""
    membership.user.save(update_fields=["language"])
    assert _lang(api_client.get(forged, HTTP_ACCEPT_LANGUAGE="zh-CN")) == "zh-hans"  # no setting: the header's


def test_translations_are_compiled_and_active():
    with translation.override("zh-hans"):
        assert translation.gettext("Dashboard") == "概览"
    with translation.override("en"):
        assert translation.gettext("Dashboard") == "Dashboard"


def test_durations_states_dates_and_amounts_in_the_locales_words():
    from datetime import UTC, datetime

    from django.utils import formats

    from console.money_text import fen
    from console.templatetags.cardmix import duration, state_word

    moment = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
    with translation.override("en"):
        assert (duration(42), duration(7500), duration(200_000)) == ("42 s", "2 h 05 min", "2 days 7 h")
        assert state_word("running") == "running" and fen(123_456_789) == "¥123.46"
        assert formats.date_format(moment, "DATETIME_FORMAT") == "2026-11-20 10:30:00 UTC+0000"
    with translation.override("zh-hans"):
        assert (duration(42), duration(7500), duration(200_000)) == ("42 秒", "2 小时 05 分", "2 天 7 小时")
        assert state_word("running") == "运行中" and fen(123_456_789) == "¥123.46"
        assert formats.date_format(moment, "DATETIME_FORMAT") == "2026年11月20日 10:30:00 UTC+0000"
        assert formats.date_format(moment, "DATE_FORMAT") == "2026年11月20日"
