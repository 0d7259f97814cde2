"""The demo seeds storage: prices in every zone, the library (ImageNet-1K, WuDao, Llama-class 70B/405B) in every
zone, and the H100 demo instance's disk, shared volume and ImageNet mount; a second run adds nothing."""
import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_seed_demo_seeds_storage_once(catalog):
    from inventory.models import Zone
    from provisioning.models import Instance
    from storage.models import Dataset, StoragePrice, Volume
    from storage.selectors import datasets_for_instance, volumes_for_instance

    call_command("seed_demo")
    call_command("seed_demo")
    zones = Zone.objects.count()
    assert zones >= 1 and StoragePrice.objects.count() == 2 * zones
    assert sorted(Dataset.objects.values_list("slug", flat=True)) == ["imagenet-1k", "llama-405b", "llama-70b",
                                                                      "wudao-corpus"]
    assert all(d.zones.count() == zones for d in Dataset.objects.all())
    h100 = Instance.objects.get(name="demo-h100x2")
    assert [(a.volume.name, a.mount_path) for a in volumes_for_instance(instance_id=h100.pk)] == [
        ("demo-ckpt", "/data"), ("team-data", "/mnt/team-data")]
    assert [m.dataset.slug for m in datasets_for_instance(instance_id=h100.pk)] == ["imagenet-1k"]
    assert Volume.objects.count() == 2 and h100.zone_id == Volume.objects.first().zone_id
