"""How the console writes CNY amounts: the minus (U+2212) before the currency sign, the API's strings untouched."""
import pytest

from billing.funds import spend
from console.templatetags.cardmix import fen, per_second, rate
from tests.factories.billing import set_credit_limit

pytestmark = pytest.mark.django_db
MINUS = "\u2212"


def test_a_refusal_never_reads_as_funds_covering_the_need():
    from console.service_text import for_people

    text = for_people("Available funds 9.996000 CNY do not cover 10.000000 CNY (0.166667 h at 60.000000 CNY/h)")
    assert text == "Available funds ¥9.99 do not cover ¥10.00 (10 min at ¥60.00/h)"
    assert for_people("Available funds -0.004000 CNY do not cover 0.001000 CNY") == (
        f"Available funds {MINUS}¥0.01 do not cover ¥0.01.")


def test_filters_put_the_minus_before_the_currency_sign():
    assert fen(-382_160_000) == f"{MINUS}¥382.16"
    assert fen(-1_234_567_890_000) == f"{MINUS}¥1,234,567.89"
    assert fen(-5_000) == f"{MINUS}¥0.01"  # half a fen rounds away from zero, as a positive one does
    assert fen(-4_999) == "¥0.00"  # nothing left to show: no sign
    assert fen(12_345_678) == "¥12.35" and fen(0) == "¥0.00"
    assert rate(-1_235_000) == f"{MINUS}¥1.235" and rate(1_900_000) == "¥1.90"
    assert per_second(-3_801_600) == f"{MINUS}¥0.001056" and per_second(3_801_600) == "¥0.001056"
    assert per_second(-3_599) == "¥0.000000"


def test_negative_cash_reads_minus_yuan_in_the_console_and_stays_exact_in_the_api(web, owner,
                                                                                   session_client_for):
    org = owner.organization
    set_credit_limit(org, 2_000_000_000)
    spend(org=org, amount=1_000_000_000 + 382_160_000, key="postpaid-spend", code="meter")  # cash 1,000 → −382.16
    for url in ("/dashboard/", "/billing/"):
        page = web.get(url).content.decode()
        assert f'id="balance-cash" data-ucny="-382160000">{MINUS}¥382.16<' in page, url
        assert "¥-" not in page, url
    body = session_client_for(owner).get("/api/v1/billing/balance/").json()
    assert body["cash"] == "-382.160000"  # the API's money format is unchanged
