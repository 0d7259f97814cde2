"""Attachment rules in the services: a shared volume mounts into any number of the organization's instances of its
zone, a disk into one at a time, even when two attaches race (the volume's row lock decides)."""
import threading
import uuid

import pytest
from django.db import connection

from core.errors import ServiceError
from storage.models import VolumeAttachment
from storage.services import VolumeAttached, volume_attach, volume_detach
from tests.factories.billing import fund
from tests.factories.inventory import ZoneFactory
from tests.factories.storage import make_volume
from tests.factories.tenancy import OrganizationFactory


@pytest.mark.django_db
def test_shared_mounts_into_many_a_disk_into_one():
    org = OrganizationFactory()
    fund(org, 100_000_000)
    zone = ZoneFactory()
    shared = make_volume(org, zone, name="team", kind="shared")
    disk = make_volume(org, zone, name="data")
    a, b = uuid.uuid4(), uuid.uuid4()
    for inst in (a, b):
        assert volume_attach(org=org, volume_id=shared.pk, instance_id=inst, zone_id=zone.pk).mount_path == "/mnt/team"
    assert volume_attach(org=org, volume_id=disk.pk, instance_id=a, zone_id=zone.pk).mount_path == "/data"
    with pytest.raises(VolumeAttached):
        volume_attach(org=org, volume_id=disk.pk, instance_id=b, zone_id=zone.pk)
    volume_detach(org=org, volume_id=disk.pk, instance_id=a)
    assert volume_attach(org=org, volume_id=disk.pk, instance_id=b, zone_id=zone.pk).instance_id == b
    with pytest.raises(ServiceError) as refused:
        volume_attach(org=org, volume_id=shared.pk, instance_id=uuid.uuid4(), zone_id=ZoneFactory().pk)
    assert refused.value.status == 400 and "volume" in refused.value.details


@pytest.mark.django_db(transaction=True)
def test_two_racing_attaches_of_one_disk_leave_one_attachment():
    org = OrganizationFactory()
    fund(org, 100_000_000)
    zone = ZoneFactory()
    disk = make_volume(org, zone, name="data")
    barrier, outcomes = threading.Barrier(2), []

    def attach():
        try:
            barrier.wait()
            volume_attach(org=org, volume_id=disk.pk, instance_id=uuid.uuid4(), zone_id=zone.pk)
            outcomes.append("attached")
        except VolumeAttached:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=attach) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["attached", "refused"]
    assert VolumeAttachment.objects.live().filter(volume=disk).count() == 1
