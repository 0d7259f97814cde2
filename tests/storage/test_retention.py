"""An organization out of funds keeps its volumes (still metered), is warned by email and banner 7 days and 1 day
before deletion, and the volume is deleted only after VOLUME_RETENTION_DAYS unpaid, audited (clock-driven)."""
from datetime import timedelta

import pytest
from django.core import mail

from billing.models import Meter
from billing.tick import meter_tick
from core.dbclock import db_now
from storage.choices import VolumeState
from storage.models import Volume
from storage.retention import deletion_due, retention_warnings, volumes_retention_sweep
from tenancy.models import AuditEvent
from tests.factories.billing import fund
from tests.factories.inventory import ZoneFactory
from tests.factories.storage import make_volume

pytestmark = pytest.mark.django_db


def broke_org_with_volume(member_factory):
    """A 100 GiB disk whose organization paid its first few minutes and then ran dry (the tick wrote off the rest)."""
    owner = member_factory(role="owner")
    org = owner.organization
    fund(org, 3_000)  # 10 minutes of 100 GiB at 140 µCNY/GiB-h is 2,334 µCNY
    volume = make_volume(org, ZoneFactory(), name="ckpt", size_gib=100)
    Meter.objects.filter(instance_id=volume.pk).update(opened_at=db_now() - timedelta(days=2))
    meter_tick()
    return owner, volume


@pytest.fixture
def sweep(django_capture_on_commit_callbacks):
    """The sweep at `at`, its after-commit emails sent."""
    def run(at):
        with django_capture_on_commit_callbacks(execute=True):
            return volumes_retention_sweep(now=at)
    return run


def test_kept_warned_twice_and_deleted_only_after_retention(member_factory, settings, sweep):
    settings.VOLUME_RETENTION_DAYS = 30
    owner, volume = broke_org_with_volume(member_factory)
    t = db_now()
    assert sweep(t)["unpaid"] == 1
    volume.refresh_from_db()
    assert volume.unpaid_since == t and deletion_due(volume) == t + timedelta(days=30)
    mail.outbox.clear()

    assert sweep(t + timedelta(days=22, hours=23))["warned"] == 0  # not yet 7 days before
    assert mail.outbox == [] and retention_warnings(org=owner.organization) == []
    assert sweep(t + timedelta(days=23))["warned"] == 1
    assert len(mail.outbox) == 1 and owner.user.email in mail.outbox[0].to
    assert "ckpt" in mail.outbox[0].subject and "deleted" in mail.outbox[0].body
    banner = retention_warnings(org=owner.organization)
    assert [b["volume"].pk for b in banner] == [volume.pk] and banner[0]["deletion_at"] == t + timedelta(days=30)
    assert sweep(t + timedelta(days=25))["warned"] == 0  # once per warning

    assert sweep(t + timedelta(days=29))["warned"] == 1
    assert len(mail.outbox) == 2
    assert sweep(t + timedelta(days=29, hours=23, minutes=59))["deleted"] == 0
    volume.refresh_from_db()
    assert volume.state == VolumeState.READY
    # Still metered all the while: the meter is open and has gone on accounting (written off: nothing to pay with).
    meter = Meter.objects.get(instance_id=volume.pk, closed_at=None)
    assert meter.written_off_amount > 0

    assert sweep(t + timedelta(days=30))["deleted"] == 1
    volume.refresh_from_db()
    assert volume.state == VolumeState.DELETED and volume.deleted_at is not None
    assert "unpaid for 30 days" in volume.deleted_reason
    assert not Meter.objects.filter(instance_id=volume.pk, closed_at=None).exists()
    actions = list(AuditEvent.objects.filter(target_id=str(volume.pk)).order_by("created_at")
                   .values_list("action", flat=True))
    assert actions == ["volume.create", "volume.retention_warning", "volume.retention_warning", "volume.delete"]
    assert sweep(t + timedelta(days=31)) == {"unpaid": 0, "recovered": 0, "warned": 0, "deleted": 0}


def test_topping_up_ends_the_episode(member_factory, sweep):
    owner, volume = broke_org_with_volume(member_factory)
    t = db_now()
    sweep(t)
    sweep(t + timedelta(days=24))
    volume.refresh_from_db()
    assert volume.warned_7d_at is not None
    fund(owner.organization, 100_000_000, key="retention-topup")
    assert sweep(t + timedelta(days=31))["recovered"] == 1
    volume.refresh_from_db()
    assert volume.state == VolumeState.READY
    assert (volume.unpaid_since, volume.warned_7d_at, volume.warned_1d_at) == (None, None, None)
    assert retention_warnings(org=owner.organization) == []


def test_a_late_sweep_postpones_deletion_so_each_warning_keeps_its_lead(member_factory, sweep):
    """The beat was down for weeks: the first sweep after the retention's end warns, and deletion waits 7 days and
    then 1 day more instead of happening at once, unannounced."""
    _, volume = broke_org_with_volume(member_factory)
    t = db_now()
    sweep(t)
    late = t + timedelta(days=40)
    assert sweep(late) == {"unpaid": 0, "recovered": 0, "warned": 1, "deleted": 0}
    volume = Volume.objects.get(pk=volume.pk)
    assert deletion_due(volume) == late + timedelta(days=7)
    assert sweep(late + timedelta(days=6))["warned"] == 1  # the 1-day warning, a day before the new date
    assert sweep(late + timedelta(days=6, hours=23))["deleted"] == 0
    assert sweep(late + timedelta(days=7))["deleted"] == 1
