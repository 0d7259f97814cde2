"""Fapiao requests over real payments (localstripe): capped by what was paid minus what was refunded or already
invoiced, 专用 fields and the taxpayer id checked, two requests at once cannot both pass the cap, operators issue
(PDF upload) or reject in the admin, the customer downloads the PDF, and a refund after issue flags a red-letter
reversal. Another organization's fapiao answers 404 everywhere."""
import pytest
from django.core import mail
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction

from billing.fapiao.services import fapiao_request
from billing.models_fapiao import FapiaoRequest, FapiaoState
from billing.payments.services import topup_refund
from core.errors import ValidationFailed
from tenancy.models import AuditEvent
from tests.console.conftest import login_client
from tests.payments.conftest import post_raw, sign
from tests.payments.test_refunds import _paid_topup, _refund_event, staff_client  # noqa: F401 (a fixture)
from tests.races import Aside

pytestmark = [pytest.mark.django_db(transaction=True)]

USCC = "91330100716105852F"
PDF = b"%PDF-1.7\n% a fapiao\n%%EOF\n"
SPECIAL = {"kind": "special", "title": "Zhejiang University AI Lab", "taxpayer_id": USCC,
           "address": "866 Yuhangtang Rd, Hangzhou", "phone": "0571-87951111", "bank_name": "ICBC Hangzhou",
           "bank_account": "1202021209900000000"}


def _issue(staff, fapiao, number="24332000000012345678", pdf=PDF):
    return staff.post(f"/admin/billing/fapiaorequest/{fapiao.pk}/change/",
                      {"decision": "issue", "issued_number": number,
                       "pdf_file": SimpleUploadedFile("f.pdf", pdf, content_type="application/pdf")}, follow=True)


def test_request_issue_download_and_a_refund_after_issue(stripe_env, webhook_to_live_server, member_factory,
                                                        session_client_for, staff_client):  # noqa: F811
    owner = member_factory(role="owner")
    api = session_client_for(owner)
    topup = _paid_topup(api, "100.00")
    assert api.get("/api/v1/billing/fapiao/available/").json() == {
        "paid": "100.000000", "refunded": "0.000000", "invoiced": "0.000000", "available": "100.000000"}

    # 专用 without the bank details, a mistyped taxpayer id, fractions of a fen, unknown fields: 400, nothing stored.
    r = api.post("/api/v1/billing/fapiao/", {**SPECIAL, "amount": "60.00", "bank_name": "", "bank_account": ""},
                 format="json")
    assert r.status_code == 400 and {"bank_name", "bank_account"} <= set(r.json()["error"]["details"]), r.json()
    r = api.post("/api/v1/billing/fapiao/", {**SPECIAL, "amount": "60.00", "taxpayer_id": USCC[:-1] + "G"},
                 format="json")
    assert r.status_code == 400 and "check character" in str(r.json()["error"]["details"]["taxpayer_id"])
    assert api.post("/api/v1/billing/fapiao/", {**SPECIAL, "amount": "60.001"}, format="json").status_code == 400
    r = api.post("/api/v1/billing/fapiao/", {**SPECIAL, "amount": "60.00", "colour": "red"}, format="json")
    assert r.status_code == 400 and "colour" in r.json()["error"]["details"]
    assert not FapiaoRequest.objects.exists()

    first = api.post("/api/v1/billing/fapiao/", {**SPECIAL, "amount": "60.00"}, format="json")
    assert first.status_code == 201 and first.json()["state"] == "requested" and first.json()["pdf_url"] is None
    r = api.post("/api/v1/billing/fapiao/", {"kind": "normal", "title": "Zhang San", "amount": "40.01"}, format="json")
    assert r.status_code == 400 and "At most 40.000000" in str(r.json()["error"]["details"]["amount"])
    second = api.post("/api/v1/billing/fapiao/", {"kind": "normal", "title": "Zhang San", "amount": "40.00"},
                      format="json").json()
    assert api.get("/api/v1/billing/fapiao/available/").json()["available"] == "0.000000"
    assert api.post(f"/api/v1/billing/fapiao/{second['id']}/cancel/", {}, format="json").json()["state"] == "cancelled"
    assert api.get("/api/v1/billing/fapiao/available/").json()["available"] == "40.000000"

    # Another organization sees none of it.
    stranger = session_client_for(member_factory(role="owner"))
    for path in (f"/api/v1/billing/fapiao/{first.json()['id']}/", f"/api/v1/billing/fapiao/{first.json()['id']}/pdf/"):
        assert stranger.get(path).status_code == 404
    assert stranger.post(f"/api/v1/billing/fapiao/{first.json()['id']}/cancel/", {}, format="json").status_code == 404
    assert stranger.get("/api/v1/billing/fapiao/").json()["results"] == []

    # Operators: a number that is not digits or a file that is not a PDF is refused; then issued, emailed.
    fapiao = FapiaoRequest.objects.get(pk=first.json()["id"])
    assert "Not saved" in _issue(staff_client, fapiao, pdf=b"GIF89a").content.decode()
    assert "Not saved" in _issue(staff_client, fapiao, number="12ab").content.decode()
    assert FapiaoRequest.objects.get(pk=fapiao.pk).state == FapiaoState.REQUESTED
    mail.outbox.clear()
    _issue(staff_client, fapiao)
    fapiao.refresh_from_db()
    assert (fapiao.state, fapiao.number, bytes(fapiao.pdf)) == (FapiaoState.ISSUED, "24332000000012345678", PDF)
    assert len(mail.outbox) == 1 and "24332000000012345678" in mail.outbox[0].subject
    assert stranger.get(f"/api/v1/billing/fapiao/{fapiao.pk}/pdf/").status_code == 404
    pdf = api.get(f"/api/v1/billing/fapiao/{fapiao.pk}/pdf/")
    assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf" and pdf.content == PDF
    console = login_client(owner)
    page = console.get("/billing/fapiao/").content.decode()
    assert "Zhejiang University AI Lab" in page and f"/billing/fapiao/{fapiao.pk}/pdf/" in page
    assert console.get(f"/billing/fapiao/{fapiao.pk}/pdf/").content == PDF
    assert login_client(member_factory(role="owner")).get(f"/billing/fapiao/{fapiao.pk}/pdf/").status_code == 404

    # A 50.00 refund leaves 50.00 paid under a 60.00 fapiao: 10.00 of it is flagged for a red-letter reversal.
    topup_refund(topup_id=topup.pk, amount_fen=5000)
    body = _refund_event(topup, "evt_fapiao_refund")
    for _ in range(2):  # delivered and replayed: flagged once
        assert post_raw(webhook_to_live_server, body, sign(body, stripe_env.STRIPE_WEBHOOK_SECRET))[0] == 200
    fapiao.refresh_from_db()
    assert fapiao.red_letter_amount == 10_000_000 and fapiao.red_letter_flagged_at is not None
    assert AuditEvent.objects.filter(action="fapiao.red_letter_needed", target_id=str(fapiao.pk)).count() == 1
    assert "to be reversed" in console.get("/billing/fapiao/").content.decode()
    needed = staff_client.get("/admin/billing/fapiaorequest/?red_letter=needed").content.decode()
    assert "Zhejiang University AI Lab" in needed and "10.000000" in needed
    assert api.get("/api/v1/billing/fapiao/available/").json() == {
        "paid": "100.000000", "refunded": "50.000000", "invoiced": "50.000000", "available": "0.000000"}


def test_a_rejected_request_gives_its_amount_back_and_tells_the_customer(stripe_env, webhook_to_live_server,
                                                                        member_factory, session_client_for,
                                                                        staff_client):  # noqa: F811
    owner = member_factory(role="owner")
    api = session_client_for(owner)
    _paid_topup(api, "50.00")
    # Through the console's form: a mistyped taxpayer id is shown on its field and nothing is stored.
    console = login_client(owner)
    form = {"kind": "normal", "title": "Xiamen Univ", "amount": "50.00", "taxpayer_id": USCC[:-1] + "G"}
    page = console.post("/billing/fapiao/", form).content.decode()
    assert "check character does not match" in page and not FapiaoRequest.objects.exists()
    assert console.post("/billing/fapiao/", {**form, "taxpayer_id": USCC.lower()}).status_code == 302
    made = api.get("/api/v1/billing/fapiao/").json()["results"][0]
    assert (made["taxpayer_id"], made["amount"], made["state"]) == (USCC, "50.000000", "requested")
    viewer = login_client(member_factory(role="viewer", org=owner.organization))
    assert viewer.get("/billing/fapiao/").status_code == 404  # viewers read no billing: the area does not exist
    member = login_client(member_factory(role="member", org=owner.organization))
    assert "Request a fapiao" not in member.get("/billing/fapiao/").content.decode()
    assert member.post("/billing/fapiao/", form).status_code == 403
    url = f"/admin/billing/fapiaorequest/{made['id']}/change/"
    assert "needs the reason" in staff_client.post(url, {"decision": "reject", "reject_reason": ""}).content.decode()
    mail.outbox.clear()
    staff_client.post(url, {"decision": "reject", "reject_reason": "The title must match the payer's name."})
    body = api.get(f"/api/v1/billing/fapiao/{made['id']}/").json()
    assert body["state"] == "rejected" and body["reason"] == "The title must match the payer's name."
    assert len(mail.outbox) == 1 and "match the payer" in mail.outbox[0].body
    assert api.get("/api/v1/billing/fapiao/available/").json()["available"] == "50.000000"
    assert api.post(f"/api/v1/billing/fapiao/{made['id']}/cancel/", {}, format="json").status_code == 409


def test_two_requests_at_once_cannot_both_pass_the_cap(stripe_env, webhook_to_live_server, member_factory,
                                                      session_client_for):
    owner = member_factory(role="owner")
    _paid_topup(session_client_for(owner), "100.00")
    org = owner.organization
    with transaction.atomic():
        fapiao_request(org=org, kind="normal", amount=60_000_000, title="First")
        other = Aside(lambda: fapiao_request(org=org, kind="normal", amount=60_000_000, title="Second"))
        assert other.running(wait=1.0)  # waits on the organization's fapiao lock, not on a stale read
    with pytest.raises(ValidationFailed) as refused:
        other.result()
    assert "At most 40.000000" in str(refused.value.details["amount"])
    assert list(FapiaoRequest.objects.values_list("title", flat=True)) == ["First"]
