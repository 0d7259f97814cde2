"""Real-name verification (实名认证): the GB 11643 check character, submissions through the API and the console,
the operator's decision in the admin, the provider hook, and the policy that keeps an unverified organization off
H100/H800, bare metal and large top-ups (403 verification_required in the API and the console)."""
import base64
import itertools

import pytest
from django.core import mail

from core.cn_codes import ID_CHECK, id_check_char, id_number_error, id_number_masked
from tenancy.models import AuditEvent
from tenancy.models_realname import RealNameVerification
from tenancy.realname.sealing import id_number_unseal
from tenancy.realname.services import realname_approve, realname_reject, realname_submit
from tests.console.test_instances import H100_2
from tests.factories.tenancy import login_client

from .conftest import assert_error

URL = "/api/v1/organizations/current/verification/"
# GB 11643-1999's own example (a person born 1949-12-31 in Beijing's Chaoyang district), and two built here.
VALID_IDS = ["11010519491231002X", "440305" "19900307" "123" + id_check_char("44030519900307123"),
             "33010620000229004" + id_check_char("33010620000229004")]
PDF = b"%PDF-1.7\n% a scanned business licence\n%%EOF\n"


def unverified(membership):
    org = membership.organization
    org.real_name_verified_at = None
    org.save(update_fields=["real_name_verified_at"])
    return membership


# --- GB 11643 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("number", VALID_IDS)
def test_valid_identification_numbers_pass(number):
    assert id_number_error(number) == ""


@pytest.mark.parametrize("number", VALID_IDS)
def test_every_single_substitution_is_refused(number):
    # MOD 11-2 has no weight ≡ 0 (mod 11) and 11 is prime: any one changed character changes the check.
    for i, c in itertools.product(range(18), "0123456789X"):
        if c != number[i] and (i == 17 or c != "X"):
            typo = number[:i] + c + number[i + 1:]
            assert id_number_error(typo), typo


def test_every_transposition_of_neighbours_is_refused():
    number = VALID_IDS[0]
    for i in range(17):
        swapped = number[:i] + number[i + 1] + number[i] + number[i + 2:]
        if swapped != number:
            assert id_number_error(swapped), swapped


@pytest.mark.parametrize("number, words", [
    ("1101051949123100", "18 characters"), ("11010519491231002x"[:17] + "Y", "17 digits"),
    ("11010519491331002X", "date of birth"), ("11010518000101002X", "possible date"),
    ("00010519491231002X", "region"), ("１１０１０５１９４９１２３１００２Ｘ", "17 digits"),
])
def test_malformed_numbers_say_why(number, words):
    assert words in id_number_error(number)


def test_check_character_table_and_mask():
    assert id_check_char("11010519491231002") == "X" and len(ID_CHECK) == 11
    assert id_number_masked("11010519491231002X") == "1101**********002X"


# --- Submissions ----------------------------------------------------------------------------------

@pytest.mark.django_db
def test_an_individual_submits_the_number_is_sealed_and_shown_masked(member_factory, token_client_for):
    owner = unverified(member_factory(role="owner"))
    client = token_client_for(owner)
    r = client.post(URL, {"kind": "individual", "legal_name": "韩梅梅", "id_number": "11010519491231002x"},
                    format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["state"] == "pending" and body["id_number_masked"] == "1101**********002X"
    assert "11010519491231002X" not in r.content.decode()
    row = RealNameVerification.objects.get(pk=body["id"])
    assert b"11010519491231002X" not in bytes(row.id_number_sealed)
    assert id_number_unseal(row.id_number_sealed) == "11010519491231002X"
    status = client.get(URL).json()
    assert status["verified"] is False and status["limited"] is True and status["current"]["id"] == body["id"]
    assert status["policy"]["refused_accelerators"] == ["h100", "h800"] and status["policy"]["topup_max"] == "100.000000"
    event = AuditEvent.objects.get(action="realname.submit", organization=owner.organization)
    assert event.details["id_number"] == "1101**********002X" and "11010519491231002X" not in str(event.details)
    # One under review at a time.
    again = client.post(URL, {"kind": "individual", "legal_name": "韩梅梅", "id_number": VALID_IDS[1]}, format="json")
    assert_error(again, 409, "invalid_state")


@pytest.mark.django_db
@pytest.mark.parametrize("body, field", [
    ({"kind": "individual", "legal_name": "李雷", "id_number": "11010519491231002"}, "id_number"),
    ({"kind": "individual", "legal_name": "李雷", "id_number": "110105194912310021"}, "id_number"),
    ({"kind": "individual", "legal_name": " ", "id_number": "11010519491231002X"}, "legal_name"),
    ({"kind": "enterprise", "legal_name": "某某科技有限公司", "credit_code": "91330100716105852G",
      "licence": base64.b64encode(PDF).decode()}, "credit_code"),
    ({"kind": "enterprise", "legal_name": "某某科技有限公司", "credit_code": "91330100716105852F"}, "licence"),
    ({"kind": "enterprise", "legal_name": "某某科技有限公司", "credit_code": "91330100716105852F",
      "licence": base64.b64encode(b"MZ not a licence").decode()}, "licence"),
    ({"kind": "enterprise", "legal_name": "某某科技有限公司", "credit_code": "91330100716105852F",
      "licence": "%%% not base64"}, "licence"),
    ({"kind": "robot", "legal_name": "x"}, "kind"),
])
def test_bad_submissions_name_the_field_and_keep_nothing(member_factory, token_client_for, body, field):
    owner = unverified(member_factory(role="owner"))
    error = assert_error(token_client_for(owner).post(URL, body, format="json"), 400, "validation_error")
    assert field in error["details"], error
    assert not RealNameVerification.objects.filter(organization=owner.organization).exists()


@pytest.mark.django_db
def test_approval_verifies_the_organization_and_emails_owners(member_factory, operator_client,
                                                              django_capture_on_commit_callbacks):
    owner = unverified(member_factory(role="owner"))
    v = realname_submit(org=owner.organization, actor=owner.user, kind="enterprise", legal_name="杭州某某科技有限公司",
                        credit_code="91330100716105852f", licence=PDF)
    assert v.credit_code == "91330100716105852F" and v.licence_type == "application/pdf"
    # The operator sees the licence, and decides on the request's admin page.
    page = operator_client.get(f"/admin/tenancy/realnameverification/{v.pk}/change/")
    assert page.status_code == 200 and b"business licence" in page.content
    assert operator_client.get(f"/admin/tenancy/realnameverification/{v.pk}/licence/").content == PDF
    refused = operator_client.post(f"/admin/tenancy/realnameverification/{v.pk}/change/",
                                   {"decision": "reject", "reject_reason": ""})
    assert refused.status_code == 200 and b"reason the customer will read" in refused.content
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        done = operator_client.post(f"/admin/tenancy/realnameverification/{v.pk}/change/", {"decision": "approve"})
    assert done.status_code == 302
    owner.organization.refresh_from_db()
    assert owner.organization.real_name_verified_at is not None
    assert [m.subject for m in mail.outbox] == [f"Cardmix: {owner.organization.name} is verified"]
    assert mail.outbox[0].to == [owner.user.email]
    event = AuditEvent.objects.get(action="realname.approve", organization=owner.organization)
    assert event.actor == operator_client.user and event.details["by"] == "operator"
    with pytest.raises(Exception, match="already approved"):
        realname_approve(verification_id=v.pk, actor=operator_client.user)


@pytest.mark.django_db
def test_a_rejection_carries_its_reason_and_allows_a_new_submission(member_factory, settings):
    owner = unverified(member_factory(role="owner"))
    v = realname_submit(org=owner.organization, actor=owner.user, kind="individual", legal_name="李雷",
                        id_number=VALID_IDS[1])
    realname_reject(verification_id=v.pk, reason="The name does not match the number.", actor=None)
    web = login_client(owner)
    page = web.get("/account/verification/").content.decode()
    assert "The name does not match the number." in page and 'id="realname-form"' in page
    assert "use H100, H800 cards" in page and "¥100.00" in page
    r = web.post("/account/verification/", {"kind": "individual", "legal_name": "李雷", "id_number": VALID_IDS[2]})
    assert r.status_code == 302
    assert RealNameVerification.objects.filter(organization=owner.organization, state="pending").count() == 1
    page = web.get("/account/verification/").content.decode()
    assert 'data-realname-state="pending"' in page and 'id="realname-form"' not in page


@pytest.mark.django_db
def test_console_form_errors_and_roles(member_factory):
    owner = unverified(member_factory(role="owner"))
    web = login_client(owner)
    r = web.post("/account/verification/", {"kind": "enterprise", "legal_name": "某某公司",
                                             "credit_code": "91330100716105852G"})
    page = r.content.decode()
    assert r.status_code == 200 and "check character does not match" in page and "Upload the business licence" in page
    viewer = member_factory(role="viewer", org=owner.organization)
    page = login_client(viewer).get("/account/verification/").content.decode()
    assert 'id="realname-form"' not in page and "Ask an owner or admin" in page
    assert login_client(viewer).post("/account/verification/", {"kind": "individual"}).status_code == 403


PROVIDER_CALLS: list = []


def provider_check(verification, id_number):
    """An automated check as an operator would plug one in (REALNAME_PROVIDER): approves 韩梅梅's number only."""
    PROVIDER_CALLS.append((verification.legal_name, id_number))
    if verification.legal_name == "boom":
        raise ConnectionError("provider down")
    ok = (verification.legal_name, id_number) == ("韩梅梅", "11010519491231002X")
    return {"verdict": "approved" if ok else "rejected", "reason": "No such person.", "reference": "chk-1"}


@pytest.mark.django_db
def test_the_provider_hook_decides_or_leaves_it_to_an_operator(member_factory, settings):
    settings.REALNAME_PROVIDER = "tests.tenancy.test_realname.provider_check"
    PROVIDER_CALLS.clear()
    a, b, c = (unverified(member_factory(role="owner")) for _ in range(3))
    ok = realname_submit(org=a.organization, actor=a.user, kind="individual", legal_name="韩梅梅",
                         id_number=VALID_IDS[0])
    assert ok.state == "approved" and ok.decided_by is None
    assert RealNameVerification.objects.get(pk=ok.pk).provider_result == {
        "verdict": "approved", "reason": "No such person.", "reference": "chk-1"}
    bad = realname_submit(org=b.organization, actor=b.user, kind="individual", legal_name="李雷",
                          id_number=VALID_IDS[0])
    assert bad.state == "rejected" and bad.reason == "No such person."
    down = realname_submit(org=c.organization, actor=c.user, kind="individual", legal_name="boom",
                           id_number=VALID_IDS[0])
    assert down.state == "pending"  # an outage leaves it to an operator, losing nothing
    assert PROVIDER_CALLS == [("韩梅梅", VALID_IDS[0]), ("李雷", VALID_IDS[0]), ("boom", VALID_IDS[0])]
    assert AuditEvent.objects.get(action="realname.approve", organization=a.organization).details["by"] == "provider"


# --- The policy -----------------------------------------------------------------------------------

def _create(client, slug, kind="container", count=1):
    image = "cann-torch-npu" if slug == "ascend-910b" else "pytorch-2.3-cuda12.3"
    return client.post("/api/v1/instances/", {"name": "p", "kind": kind, "image": image,
                                              "items": [{"accelerator": slug, "count": count}]}, format="json")


@pytest.mark.django_db
def test_an_unverified_organization_is_refused_h100_h800_and_bare_metal(member_factory, token_client_for, catalog):
    from tests.factories.provisioning import funded, make_fleet

    make_fleet(h100=1, h800=1, ascend=2)
    owner = funded(unverified(member_factory(role="owner")))
    client = token_client_for(owner)
    for slug in ("h100-sxm-80g", "h800-sxm-80g"):
        error = assert_error(_create(client, slug), 403, "verification_required")
        assert error["details"] == {"accelerator": [slug]} and "Real-name verification" in error["message"]
    error = assert_error(_create(client, "ascend-910b", kind="bare_metal", count=8), 403, "verification_required")
    assert error["details"] == {"kind": ["bare_metal"]}
    assert not owner.organization.instances.exists()
    assert _create(client, "ascend-910b").status_code == 201  # the rest of the catalog is open
    # A card-mix policy never places the refused types for it.
    r = client.post("/api/v1/instances/", {"name": "mix", "kind": "container", "image": "pytorch-2.3-cuda12.3",
                                           "images": {"huawei": "cann-torch-npu", "nvidia": "pytorch-2.3-cuda12.3"},
                                           "policy": {"total_cards": 4, "compatible_vendors": ["nvidia", "huawei"]}},
                    format="json")
    if r.status_code == 201:
        assert {it["accelerator"] for it in r.json()["items"]} == {"ascend-910b"}
    else:
        assert r.json()["error"]["code"] in ("insufficient_capacity", "validation_error"), r.content
    # Verified: the same request goes through.
    v = realname_submit(org=owner.organization, actor=owner.user, kind="individual", legal_name="韩梅梅",
                        id_number=VALID_IDS[0])
    realname_approve(verification_id=v.pk, actor=None)
    assert _create(client, "h100-sxm-80g").status_code == 201


@pytest.mark.django_db
def test_the_console_create_form_says_verification_is_required(member_factory, catalog):
    from tests.factories.provisioning import funded, make_fleet

    make_fleet(h100=1)
    owner = funded(unverified(member_factory(role="owner")))
    web = login_client(owner)
    page = web.get("/instances/new/").content.decode()
    assert 'id="realname-banner"' in page and "/account/verification/" in page
    r = web.post("/instances/new/", {**H100_2, "idempotency_key": "k" * 32})
    assert r.status_code == 403, r.status_code
    assert "needs a verified organization" in r.content.decode()
    assert not owner.organization.instances.exists()


@pytest.mark.django_db
def test_unverified_top_ups_stop_at_100_cny_in_all(member_factory, settings):
    from billing.models_payments import TopUp
    from billing.payments.services import topup_row_create
    from core.errors import VerificationRequired

    owner = unverified(member_factory(role="owner"))
    org = owner.organization
    TopUp.objects.create(organization=org, amount=60_000_000, amount_fen=6_000, state="succeeded")
    TopUp.objects.create(organization=org, amount=500_000_000, amount_fen=50_000, state="failed")  # never paid
    with pytest.raises(VerificationRequired, match="40.00"):
        topup_row_create(org=org, actor=owner.user, amount=50_000_000)
    assert topup_row_create(org=org, actor=owner.user, amount=40_000_000).amount == 40_000_000
    with pytest.raises(VerificationRequired):
        topup_row_create(org=org, actor=owner.user, amount=10_000_000)
    org.real_name_verified_at = org.created_at
    org.save(update_fields=["real_name_verified_at"])
    assert topup_row_create(org=org, actor=owner.user, amount=500_000_000).amount == 500_000_000
    settings.REALNAME_POLICY = False  # the operator may turn the policy off entirely
    org.real_name_verified_at = None
    org.save(update_fields=["real_name_verified_at"])
    assert topup_row_create(org=org, actor=owner.user, amount=500_000_000).amount == 500_000_000


@pytest.mark.django_db
def test_the_top_up_api_answers_verification_required(member_factory, token_client_for):
    owner = unverified(member_factory(role="owner"))
    error = assert_error(token_client_for(owner).post("/api/v1/billing/topups/", {"amount": "100.01"}, format="json"),
                         403, "verification_required")
    assert "amount" in error["details"]
