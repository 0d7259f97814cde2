"""i18n: every email is written in its recipient's language (User.language), whatever language the task, the
operator's request or the sender's browser runs in: from one event, a zh-hans member reads Chinese and an English
one English (core/mail.py send_to_people). Also: the API's pagination errors and the instance notices speak the
request's language.

Each sender runs the way production runs it (the Celery task's function, the service an admin page calls, the
console view); the mails are read from django.core.mail.outbox after the transaction's commit."""
import uuid
from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext
from rest_framework.test import APIClient

from billing.choices import STOP_KEEPS_NOTHING
from billing.models import Meter
from billing.tick import meter_tick
from core.dbclock import db_now
from tests.factories.billing import fund
from tests.factories.tenancy import MembershipFactory, login_client


def zh(msgid: str) -> str:
    """The catalog's Chinese for `msgid` (fails when the catalog has none: the email would read English)."""
    with translation.override("zh-hans"):
        text = gettext(msgid)
    assert text != msgid, f"no zh-hans translation of {msgid!r}"
    return text


def han(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


def to(address: str):
    """The one message sent to `address` (each language group gets its own message)."""
    (message,) = [m for m in mail.outbox if address in m.to]
    return message


def english(message) -> bool:
    return not han(message.subject) and not han(message.body)


def chinese(message) -> bool:
    return han(message.subject) and han(message.body)


def pair(*, roles=("owner", "admin"), org=None, **extra):
    """A zh-hans member and an English one of one organization: (zh, en) memberships."""
    first = MembershipFactory(role=roles[0], user__language="zh-hans", **({"organization": org} if org else {}),
                              **extra)
    second = MembershipFactory(role=roles[1], organization=first.organization, user__language="en")
    return first, second


# --- billing: low balance (the tick's funds watch) ------------------------------------------------------

@pytest.mark.django_db
def test_low_balance_warning_in_each_recipients_language(django_capture_on_commit_callbacks, settings):
    from billing import hooks
    from billing.services import meter_open

    settings.LOW_BALANCE_WARNING_SECONDS = 3600
    saved = list(hooks._autostop)
    hooks.register_autostop(lambda **kw: None)
    try:
        owner, admin = pair()
        org = owner.organization
        fund(org, 1_800_000 + 10_000)  # 30 minutes at 3.6 CNY/h
        meter = meter_open(org=org, instance_id=uuid.uuid4(), item_index=0, accelerator="h100", cards=1,
                           rate=3_600_000)
        with django_capture_on_commit_callbacks(execute=True):
            meter_tick(now=meter.opened_at + timedelta(seconds=10))
    finally:
        hooks._autostop[:] = saved
    assert len(mail.outbox) == 2  # one message per language
    zh_mail, en_mail = to(owner.user.email), to(admin.user.email)
    assert zh_mail.to == [owner.user.email] and en_mail.to == [admin.user.email]
    assert zh_mail.subject == zh("Cardmix: your balance runs out soon") and chinese(zh_mail)
    with translation.override("en"):
        stop_keeps = str(STOP_KEEPS_NOTHING)
    assert zh(stop_keeps) in zh_mail.body and stop_keeps in en_mail.body and "¥1.80" in zh_mail.body  # money as the console writes it
    assert en_mail.subject == "Cardmix: your balance runs out soon" and english(en_mail)
    assert "available funds (¥1.80) cover about " in en_mail.body


# --- billing: a monthly package that could not renew (the renewal task) ----------------------------------

@pytest.mark.django_db(transaction=True)
def test_package_not_renewed_notice_in_each_recipients_language():
    from billing.models_products import PackageRenewal
    from billing.products.packages import package_renewals_due, package_start
    from tests.factories.billing_products import H100, package_amount

    amount = package_amount(H100)
    owner, billing = pair(roles=("owner", "billing"))
    fund(owner.organization, amount + amount // 2)
    first = package_start(org=owner.organization, instance_id=uuid.uuid4(), items=[H100],
                          renewal=PackageRenewal.RENEW)
    type(first).objects.filter(pk=first.pk).update(ends_at=first.starts_at - timedelta(seconds=1))
    assert package_renewals_due() == 1
    zh_mail, en_mail = to(owner.user.email), to(billing.user.email)
    assert zh_mail.subject == zh("Cardmix: your monthly package could not renew") and chinese(zh_mail)
    assert en_mail.subject == "Cardmix: your monthly package could not renew" and english(en_mail)
    assert "could not renew: available funds do not cover ¥" in en_mail.body


# --- billing: a fapiao decided by an operator -------------------------------------------------------------

@pytest.mark.django_db
def test_fapiao_decision_in_the_requesters_and_the_addresss_language(django_capture_on_commit_callbacks):
    from billing.fapiao.services import fapiao_reject
    from billing.models_fapiao import FapiaoRequest

    requester, colleague = pair()
    fapiao = FapiaoRequest.objects.create(organization=requester.organization, requested_by=requester.user,
                                          kind="normal", amount=12_340_000, title="清华大学",
                                          email=colleague.user.email)
    # The operator works in Chinese: that is no reason to write to the English colleague in Chinese.
    with translation.override("zh-hans"), django_capture_on_commit_callbacks(execute=True):
        fapiao_reject(fapiao_id=fapiao.pk, reason="Title does not match the payer.")
    zh_mail, en_mail = to(requester.user.email), to(colleague.user.email)
    assert zh_mail.subject == zh("Cardmix: fapiao request rejected") and "¥12.34" in zh_mail.body
    assert en_mail.subject == "Cardmix: fapiao request rejected"
    assert en_mail.body == "Your fapiao request (清华大学, ¥12.34) was rejected: Title does not match the payer."


# --- storage: an unpaid volume's deletion warning (the retention sweep) ----------------------------------

@pytest.mark.django_db
def test_volume_deletion_warning_in_each_recipients_language(django_capture_on_commit_callbacks, settings):
    from storage.retention import volumes_retention_sweep
    from tests.factories.inventory import ZoneFactory
    from tests.factories.storage import make_volume

    settings.VOLUME_RETENTION_DAYS = 30
    owner, admin = pair()
    fund(owner.organization, 3_000)
    volume = make_volume(owner.organization, ZoneFactory(), name="ckpt", size_gib=100)
    Meter.objects.filter(instance_id=volume.pk).update(opened_at=db_now() - timedelta(days=2))
    meter_tick()
    t = db_now()
    with django_capture_on_commit_callbacks(execute=True):
        assert volumes_retention_sweep(now=t)["unpaid"] == 1
        assert volumes_retention_sweep(now=t + timedelta(days=23))["warned"] == 1
    zh_mail, en_mail = to(owner.user.email), to(admin.user.email)
    assert chinese(zh_mail) and "ckpt" in zh_mail.subject and zh_mail.subject.startswith("Cardmix：")
    assert english(en_mail) and en_mail.subject.startswith("Cardmix: volume ckpt will be deleted on ")


# --- webhooks: an endpoint disabled after its retries ran out (the delivery task) -------------------------

@pytest.mark.django_db
def test_webhook_endpoint_disabled_email_in_each_recipients_language(django_capture_on_commit_callbacks, settings):
    from tests.webhooks.receiver import Receiver
    from webhooks.delivery import delivery_attempt
    from webhooks.models import WebhookDelivery
    from webhooks.services import endpoint_create, event_publish

    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.WEBHOOK_RETRY_SCHEDULE = [7200]
    receiver = Receiver().start()
    try:
        receiver.status = 500
        owner, admin = pair()
        endpoint, _ = endpoint_create(org=owner.organization, url=receiver.url, event_types=["instance.running"])
        with transaction.atomic():
            event = event_publish(org_id=owner.organization.pk, type="instance.running", dedupe_key="k",
                                  data={"instance": {"id": "k"}})
        delivery = WebhookDelivery.objects.get(event=event)
        with django_capture_on_commit_callbacks(execute=True):
            assert delivery_attempt(delivery.pk) == "retry"
            WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=db_now())
            assert delivery_attempt(delivery.pk) == "failed"
    finally:
        receiver.stop()
    zh_mail, en_mail = to(owner.user.email), to(admin.user.email)
    assert zh_mail.subject == zh("Cardmix: a webhook endpoint was disabled") and chinese(zh_mail)
    assert "2.0 小时" in zh_mail.body and endpoint.url in zh_mail.body
    assert en_mail.subject == "Cardmix: a webhook endpoint was disabled" and "failed for 2.0 hours" in en_mail.body
    endpoint.refresh_from_db()
    assert endpoint.disabled_reason == "Disabled after 2 failed attempts over 2.0 hours."  # stored: one language
    said = zh("Disabled after %(attempts)s failed attempts over %(span)s.") % {"attempts": 2, "span": "2.0 小时"}
    for url in ("/webhooks/", f"/webhooks/{endpoint.pk}/"):  # the console says it in the page's language
        assert said in login_client(owner).get(url).content.decode(), url


# --- provisioning: a dark node (the dark sweep), told to each instance's creator ---------------------------

@pytest.fixture
def dark_zone(db):
    from inventory.catalog_seed import seed_catalog
    from tests.factories.hardware import agent_node
    from tests.factories.inventory import ZoneFactory

    seed_catalog()
    zone = ZoneFactory(slug="zone-dark", name="zone-dark")
    node, _ = agent_node(driver="simulated", zone=zone, hostname="gpu-dark-01.test")
    return node


def _running(member, cards=4) -> str:
    """An instance of `member` (its organization funded) on the dark zone's node, running."""
    from provisioning.tasks import instance_advance
    from tests.factories.provisioning import container_body

    fund(member.organization, 100_000_000, key=f"i18n-mail:{member.pk}")
    client = login_client(member, APIClient)
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", cards, zone="zone-dark"), format="json")
    assert r.status_code == 201, r.json()
    assert instance_advance(r.json()["id"]) == "running"
    return r.json()["id"]


def _go_dark(node):
    """The node's agent was last heard 400 s after its instances' meters opened, and its deadline passed."""
    from hardware.models import NodeCredential
    from hardware.services import heartbeats_check

    now = db_now()
    Meter.objects.filter(closed_at__isnull=True).update(opened_at=now - timedelta(seconds=1000))
    NodeCredential.objects.filter(node=node).update(last_heartbeat_at=now - timedelta(seconds=600),
                                                    heartbeat_deadline=now - timedelta(seconds=1))
    assert heartbeats_check() == [node.hostname]


@pytest.mark.django_db
def test_dark_node_email_in_each_creators_language(dark_zone, django_capture_on_commit_callbacks):
    from provisioning.services.dark import instances_dark_sweep

    zh_member, en_member = pair(roles=("owner", "member"))
    _running(zh_member)
    _running(en_member)
    _go_dark(dark_zone)
    with django_capture_on_commit_callbacks(execute=True):
        assert instances_dark_sweep()["paused"] == 2
    zh_mail, en_mail = to(zh_member.user.email), to(en_member.user.email)
    assert zh_mail.subject == zh("Cardmix: instance %(name)s is unreachable") % {"name": "test"} and chinese(zh_mail)
    assert zh("You are not charged from then until it answers again.") in zh_mail.body
    assert en_mail.subject == "Cardmix: instance test is unreachable" and english(en_mail)
    assert "You are not charged from then until it answers again." in en_mail.body


@pytest.mark.django_db
def test_the_dark_node_notice_speaks_the_consoles_language(dark_zone):
    member = MembershipFactory(role="owner", user__language="zh-hans")
    iid = _running(member)
    _go_dark(dark_zone)
    web = login_client(member)
    page = web.get(f"/instances/{iid}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()  # the setting wins
    said = zh("The machine running this instance stopped answering. %(paid)s %(what)s") % {
        "paid": zh("You are not charged from when it was last seen until it answers again."),
        "what": zh("If it does not answer in time, the instance is failed and its cards released.")}
    assert 'id="notice-node_unreachable"' in page and said in page
    api = login_client(member, APIClient)
    [notice] = api.get(f"/api/v1/instances/{iid}/", HTTP_ACCEPT_LANGUAGE="en").json()["notices"]
    assert notice["code"] == "node_unreachable" and notice["message"] == said  # `code` stays English
    member.user.language = "en"
    member.user.save(update_fields=["language"])
    [notice] = api.get(f"/api/v1/instances/{iid}/").json()["notices"]
    assert notice["message"].startswith("The machine running this instance stopped answering. You are not charged")


# --- provisioning: a failed card (the agent's heartbeat), told to the instance's creator -------------------

@pytest.mark.django_db
def test_failed_card_email_in_the_creators_language_from_the_agents_request(django_capture_on_commit_callbacks):
    from pathlib import Path

    from inventory.catalog_seed import seed_catalog
    from tests.factories.hardware import agent_node
    from tests.factories.inventory import ZoneFactory

    seed_catalog()
    zone = ZoneFactory(slug="zone-health", name="zone-health")
    node, secret = agent_node(driver="simulated", zone=zone, hostname="gpu-health-01.test")
    from provisioning.tasks import instance_advance
    from tests.factories.provisioning import container_body, funded

    member = MembershipFactory(role="owner", user__language="zh-hans")
    client = login_client(funded(member), APIClient)
    r = client.post("/api/v1/instances/", container_body("h100-sxm-80g", 8, zone="zone-health"), format="json")
    assert instance_advance(r.json()["id"]) == "running"
    corpus = Path(__file__).resolve().parents[1] / "hardware" / "health_corpus"
    probe = {"nvidia_gpu": {"output": (corpus / "nvidia_gpu-healthy-h100.txt").read_text(), "exit_code": 0},
             "kernel_xid": {"output": (corpus / "kernel_xid-79-dmesg.txt").read_text(), "exit_code": 0}}
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    with django_capture_on_commit_callbacks(execute=True):  # the agent's request: no language of its own
        assert agent.post("/api/v1/agent/heartbeat/", {"agent_version": "1.6.0", "hostname": "h",
                                                        "runtime": "process", "health_probe": probe},
                          format="json").status_code == 200
    message = to(member.user.email)
    assert message.subject == zh("Cardmix: a card of instance %(name)s failed") % {"name": "test"}
    card = zh("%(node)s card %(index)s") % {"node": node.hostname, "index": 2}
    assert card in message.body and chinese(message) and "fallen off the bus" in message.body


# --- provisioning: a stopped instance terminated after its retention (the expiry task) ---------------------

@pytest.mark.django_db
def test_retention_termination_notice_in_each_recipients_language(django_capture_on_commit_callbacks):
    from provisioning.services.retention import instances_expire_due
    from tests.factories.provisioning import InstanceFactory

    owner, admin = pair()
    InstanceFactory(organization=owner.organization, creator=admin.user, kind="bare_metal", name="kept",
                    state="stopped", expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert instances_expire_due() == 1
    zh_mail, en_mail = to(owner.user.email), to(admin.user.email)
    assert zh_mail.subject == zh("Cardmix: stopped instance %(name)s was terminated") % {"name": "kept"}
    assert zh("A stop keeps nothing: %(lost)s.") % {"lost": zh("its nodes are wiped when released")} in zh_mail.body
    assert en_mail.subject == "Cardmix: stopped instance kept was terminated"
    assert "A stop keeps nothing: its nodes are wiped when released." in en_mail.body and english(en_mail)


# --- provisioning: a Slurm partition that could not be made (the provisioning step) ------------------------

@pytest.mark.django_db
def test_slurm_partition_email_in_each_recipients_language(settings, tmp_path, django_capture_on_commit_callbacks):
    from inventory.catalog_seed import seed_catalog
    from provisioning.models import Instance
    from provisioning.tasks import instance_advance
    from tests.factories.inventory import NodeFactory, ZoneFactory, accelerator
    from tests.factories.provisioning import funded

    failing = tmp_path / "scontrol"
    failing.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
    failing.chmod(0o755)
    settings.SLURM_SCONTROL, settings.SLURM_SACCTMGR = str(failing), ""
    settings.SIMULATOR_FAILURE_SCALE = settings.SIMULATOR_DELAY_SCALE = 0
    seed_catalog()
    zone = ZoneFactory(slug="zone-a", name="zone-a")
    for prefix, slug in (("gpu", "h800-sxm-80g"), ("npu", "ascend-910b")):
        NodeFactory(zone=zone, accelerator=accelerator(slug), hostname=f"{prefix}-a01.test", card_count=8)
    owner, admin = pair()
    client = login_client(funded(owner), APIClient)
    body = {"name": "hybrid", "kind": "bare_metal", "images": {"nvidia": "pytorch-2.3-cuda12.3",
                                                                 "huawei": "cann-torch-npu"},
            "items": [{"accelerator": "ascend-910b", "count": 8}, {"accelerator": "h800-sxm-80g", "count": 8}]}
    created = client.post("/api/v1/instances/", body, format="json").json()
    Instance.objects.filter(pk=created["id"]).update(creator=None)  # its creator left: owners and admins are told
    with django_capture_on_commit_callbacks(execute=True):
        assert instance_advance(created["id"]) == "running"
    zh_mail, en_mail = to(owner.user.email), to(admin.user.email)
    assert zh_mail.subject == zh("Cardmix: the Slurm partition of %(instance)s could not be created") % {
        "instance": "hybrid"} and chinese(zh_mail)
    assert en_mail.subject == "Cardmix: the Slurm partition of hybrid could not be created" and english(en_mail)


# --- tenancy: invitations (the console), real-name decisions (the operators' admin) ------------------------

@pytest.mark.django_db
def test_invitations_in_the_invited_accounts_language_else_the_inviters(django_capture_on_commit_callbacks):
    from tests.factories.tenancy import UserFactory

    inviter = MembershipFactory(role="owner")  # no setting: the page's language (Accept-Language) is theirs
    existing = UserFactory(language="en")
    web = login_client(inviter)
    with django_capture_on_commit_callbacks(execute=True):
        for email in ("new.person@example.com", existing.email):
            r = web.post("/account/members/invite/", {"email": email, "role": "admin"}, HTTP_ACCEPT_LANGUAGE="zh-CN")
            assert r.status_code == 302
    new, en_mail = to("new.person@example.com"), to(existing.email)
    assert new.subject == zh("You are invited to %(name)s on Cardmix") % {"name": inviter.organization.name}
    assert chinese(new) and "管理员" in new.body  # the role's name, not its slug
    assert en_mail.subject == f"You are invited to {inviter.organization.name} on Cardmix" and english(en_mail)
    assert " as Admin." in en_mail.body


@pytest.mark.django_db
def test_realname_decision_in_each_owners_language_not_the_operators(operator_client,
                                                                     django_capture_on_commit_callbacks):
    from tenancy.realname.services import realname_submit

    owner, admin = pair()
    org = owner.organization
    org.real_name_verified_at = None
    org.save(update_fields=["real_name_verified_at"])
    v = realname_submit(org=org, actor=owner.user, kind="enterprise", legal_name="杭州某某科技有限公司",
                        credit_code="91330100716105852F", licence=b"%PDF-1.7\n%%EOF\n")
    with django_capture_on_commit_callbacks(execute=True):  # the operator reads the admin in Chinese
        done = operator_client.post(f"/admin/tenancy/realnameverification/{v.pk}/change/", {"decision": "approve"},
                                    HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert done.status_code == 302
    zh_mail, en_mail = to(owner.user.email), to(admin.user.email)
    assert zh_mail.subject == zh("Cardmix: %(org)s is verified") % {"org": org.name} and chinese(zh_mail)
    assert en_mail.subject == f"Cardmix: {org.name} is verified"  # the body names the company in Chinese
    assert en_mail.body.startswith(f"The real-name verification of {org.name} (杭州某某科技有限公司) was approved.")


# --- privacy: account deletion (the console's confirmation, then the deletion) -----------------------------

@pytest.mark.django_db
def test_deletion_emails_in_the_persons_language(django_capture_on_commit_callbacks):
    import re

    from tests.factories.tenancy import PASSWORD

    # Each the only member of their organization (an only owner among others could not leave).
    zh_member = MembershipFactory(role="owner", user__language="zh-hans")
    en_member = MembershipFactory(role="owner", user__language="en")
    zh_email, en_email = zh_member.user.email, en_member.user.email
    for member in (zh_member, en_member):
        web = login_client(member)
        with django_capture_on_commit_callbacks(execute=True):
            r = web.post("/account/delete/", {"password": PASSWORD}, HTTP_ACCEPT_LANGUAGE="en")
            assert r.status_code == 302, r.content.decode()[-3000:]
        link = re.search(r"https?://\S+(/account/delete/\S+/)", mail.outbox[-1].body).group(1)
        with django_capture_on_commit_callbacks(execute=True):
            assert web.post(link, HTTP_ACCEPT_LANGUAGE="en").status_code == 200
    zh_confirm, zh_goodbye = [m for m in mail.outbox if m.to == [zh_email]]
    en_confirm, en_goodbye = [m for m in mail.outbox if m.to == [en_email]]
    assert zh_confirm.subject == zh("Confirm deleting your Cardmix account") and chinese(zh_confirm)
    assert zh_goodbye.subject == zh("Your Cardmix account was deleted") and chinese(zh_goodbye)
    assert en_confirm.subject == "Confirm deleting your Cardmix account" and english(en_confirm)
    assert en_goodbye.subject == "Your Cardmix account was deleted" and english(en_goodbye)


# --- the API's pagination errors --------------------------------------------------------------------------

@pytest.mark.django_db
def test_pagination_errors_follow_accept_language(token_client_for):
    client = token_client_for(MembershipFactory(role="owner"))
    bad = client.get("/api/v1/instances/?limit=0", HTTP_ACCEPT_LANGUAGE="zh-CN")
    body = bad.json()["error"]
    assert bad.status_code == 400 and body["code"] == "validation_error"
    assert body["details"]["limit"] == [zh("Must be at least 1.")]
    cursor = client.get("/api/v1/instances/?cursor=forged", HTTP_ACCEPT_LANGUAGE="zh-CN").json()["error"]
    assert cursor["details"]["cursor"] == [
        zh("Not a cursor of this list: follow the next or previous link as it was given.")]
    both = client.get("/api/v1/instances/?cursor=&offset=5", HTTP_ACCEPT_LANGUAGE="zh-CN").json()["error"]
    assert both["details"]["offset"] == [zh("Give either offset or cursor, not both.")]
    english_ = client.get("/api/v1/instances/?limit=0").json()["error"]
    assert english_["details"]["limit"] == ["Must be at least 1."]


@pytest.mark.django_db
def test_api_errors_built_at_import_time_follow_accept_language(token_client_for):
    """Messages kept in module constants (lazy) are read in the request's language, not the import's."""
    forged = APIClient()
    forged.credentials(HTTP_AUTHORIZATION="Bearer cmx_not-a-token")
    error = forged.get("/api/v1/instances/", HTTP_ACCEPT_LANGUAGE="zh-CN").json()["error"]
    assert error["code"] == "token_invalid"  # the code stays English
    assert error["message"] == zh("The API token is invalid, expired or revoked.")
    client = token_client_for(MembershipFactory(role="owner"))
    bad = client.post("/api/v1/ssh-keys/", {"name": "k", "public_key": "x", "colour": "red"}, format="json",
                      HTTP_ACCEPT_LANGUAGE="zh-CN").json()["error"]
    assert bad["details"]["colour"] == [zh("Unknown field.")]
