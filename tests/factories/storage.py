"""Factories for storage: prices per zone and kind, volumes (with their meter, as volume_create opens it), datasets."""
from datetime import timedelta

import factory

from storage.models import Dataset, StoragePrice
from tests.factories.inventory import ZoneFactory

DISK_PRICE = 140  # µCNY per GiB-hour: 0.10 CNY per GiB-month (720 h) — about the peers' rate
SHARED_PRICE = 250


class StoragePriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = StoragePrice

    zone = factory.SubFactory(ZoneFactory)
    kind = "disk"
    per_gib_hour = DISK_PRICE
    effective_from = factory.LazyFunction(lambda: __import__("django.utils.timezone", fromlist=["now"]).now()
                                          - timedelta(days=365))


def storage_prices(zone, *, disk: int = DISK_PRICE, shared: int = SHARED_PRICE) -> None:
    """Both kinds' prices in `zone` (effective a year ago)."""
    StoragePriceFactory(zone=zone, kind="disk", per_gib_hour=disk)
    StoragePriceFactory(zone=zone, kind="shared", per_gib_hour=shared)


def make_volume(org, zone, *, name: str = "data", kind: str = "disk", size_gib: int = 100, actor=None):
    """A volume made the real way (volume_create: the price row, the meter, the audit event); prices the zone
    first when it has none. The organization must hold FUNDS_MIN_MINUTES of its price."""
    from storage.models import StoragePrice
    from storage.services import volume_create

    if not StoragePrice.objects.filter(zone=zone, kind=kind).exists():
        StoragePriceFactory(zone=zone, kind=kind, per_gib_hour=DISK_PRICE if kind == "disk" else SHARED_PRICE)
    return volume_create(org=org, zone=zone, name=name, kind=kind, size_gib=size_gib, actor=actor)


class DatasetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Dataset
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"dataset-{n}")
    name = factory.LazyAttribute(lambda o: o.slug)
    kind = "dataset"
    size_gib = 150
    licence = "research use"

    @factory.post_generation
    def zones(obj, create, extracted, **kwargs):
        if create and extracted:
            obj.zones.set(extracted)
