"""Factories for the fleet and the catalog.

The SPEC §1 accelerators come from migration 0002; a transactional test flushes them, so
`accelerator("h100-sxm-80g")` re-seeds the catalog when needed instead of assuming it.
"""
import factory
from django.utils import timezone

from inventory.catalog_seed import CATALOG_EPOCH, seed_catalog
from inventory.choices import CardHealth, FabricKind, HolderKind, NodeState
from inventory.models import Accelerator, Card, CardAllocation, Image, Node, Price, Zone


def accelerator(slug: str) -> Accelerator:
    """The seeded accelerator with this slug (seeding the catalog again if a flush removed it)."""
    found = Accelerator.objects.filter(slug=slug).first()
    if found is None:
        seed_catalog()
        found = Accelerator.objects.get(slug=slug)
    return found


class AcceleratorFactory(factory.django.DjangoModelFactory):
    """A made-up accelerator (use `accelerator(slug)` for the seeded ones)."""

    class Meta:
        model = Accelerator
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"test-accel-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.upper())
    vendor = "nvidia"
    domestic = False
    memory_gb = 80
    collective = "nccl"
    readiness_floor_gbps = 150
    orderable = True


class PriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Price

    accelerator = factory.SubFactory(AcceleratorFactory)
    on_demand_per_card_hour = 2_000_000
    monthly_per_card_hour = None
    effective_from = CATALOG_EPOCH


class ImageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Image
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"test-image-{n}")
    name = factory.LazyAttribute(lambda o: o.slug)
    vendors = factory.LazyFunction(lambda: ["nvidia"])


class ZoneFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Zone
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"test-zone-{n}")
    name = factory.LazyAttribute(lambda o: o.slug)
    fabric_kind = FabricKind.INFINIBAND
    fabric_gbps = 400


class NodeFactory(factory.django.DjangoModelFactory):
    """A node with `card_count` healthy cards (indices 0…n-1)."""

    class Meta:
        model = Node
        skip_postgeneration_save = True

    hostname = factory.Sequence(lambda n: f"node-{n:04d}.test")
    zone = factory.SubFactory(ZoneFactory)
    accelerator = factory.LazyFunction(lambda: accelerator("h100-sxm-80g"))
    card_count = 8
    state = NodeState.AVAILABLE
    ssh_host = factory.LazyAttribute(lambda o: o.hostname)

    @factory.post_generation
    def cards(obj, create, extracted, **kwargs):
        if create and extracted is not False:
            Card.objects.bulk_create([Card(node=obj, index=i) for i in range(obj.card_count)])


class CardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Card

    node = factory.SubFactory(NodeFactory, cards=False)
    index = factory.Sequence(lambda n: n % 64)
    health = CardHealth.OK


class CardAllocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CardAllocation

    card = factory.SubFactory(CardFactory)
    holder_kind = HolderKind.INSTANCE
    holder_id = factory.Faker("uuid4", cast_to=None)
    allocated_at = factory.LazyFunction(timezone.now)


def custom_image(org, *, name: str = "trainer", reference: str = "registry.example.com/team/trainer:1.0",
                 username: str = "puller", password: str = "s3cret-pull", vendors=("nvidia",), **fields):
    """An organization's private image row as a register leaves it (no registry asked), its login sealed."""
    from inventory.custom_images import secret_seal
    from inventory.models import CustomImage

    return CustomImage.objects.create(
        organization=org, name=name, reference=reference, digest="sha256:" + "ab" * 32, architectures=["amd64"],
        vendors=list(vendors), username=username, password_encrypted=secret_seal(password) if password else None,
        **fields)
