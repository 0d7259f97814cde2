"""Factories and helpers for provisioning: a small fleet, funded members, instances in any state."""
import factory

from inventory.catalog_seed import seed_catalog
from provisioning.choices import InstanceState
from provisioning.models import Instance
from tests.factories.billing import fund
from tests.factories.inventory import NodeFactory, ZoneFactory, accelerator
from tests.factories.tenancy import OrganizationFactory


def make_fleet(zone: str = "zone-a", **nodes_per_accelerator) -> list:
    """Nodes of 8 cards in one zone, e.g. make_fleet(h100=2, ascend=1); keys are slug prefixes."""
    seed_catalog()
    slugs = {"h100": "h100-sxm-80g", "h800": "h800-sxm-80g", "a800": "a800-sxm-80g", "ascend": "ascend-910b"}
    z = ZoneFactory(slug=zone, name=zone)
    made = []
    for key, count in nodes_per_accelerator.items():
        acc = accelerator(slugs.get(key, key))
        made += [NodeFactory(zone=z, accelerator=acc, hostname=f"{key}-{zone}-{i:02d}.test") for i in range(count)]
    return made


def funded(membership, amount: int = 1_000_000_000):
    """Give the membership's organization cash (default 1,000 CNY) through the ledger; returns it."""
    from billing.ledger import platform_accounts_ensure

    platform_accounts_ensure()  # a transactional test's flush removed the migration's rows
    fund(membership.organization, amount, key=f"test-provisioning:{membership.organization_id}:{amount}")
    return membership


class InstanceFactory(factory.django.DjangoModelFactory):
    """A bare instance row in any state (no placement): for transition and API-shape tests."""

    class Meta:
        model = Instance

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"instance-{n}")
    kind = "container"
    items = factory.LazyFunction(lambda: [{"accelerator": "h100-sxm-80g", "count": 1, "rate": 1_900_000}])
    image = "pytorch-2.3-cuda12.3"
    images = factory.LazyFunction(lambda: {"nvidia": "pytorch-2.3-cuda12.3"})
    state = InstanceState.PENDING
    price_per_hour = 1_900_000


def container_body(accelerator_slug: str = "h100-sxm-80g", count: int = 1, **extra) -> dict:
    """A POST /instances/ body for a one-item container."""
    image = "cann-torch-npu" if accelerator_slug == "ascend-910b" else "pytorch-2.3-cuda12.3"
    body = {"name": "test", "kind": "container", "items": [{"accelerator": accelerator_slug, "count": count}],
            "image": image}
    body.update(extra)
    return body


def wait_for_state(instance_id, states, timeout: float = 120.0, worker=None) -> Instance:
    """Poll the database until the instance is in one of `states` (a worker process moves it)."""
    import time

    states = {states} if isinstance(states, str) else set(states)
    deadline = time.time() + timeout
    while time.time() < deadline:
        inst = Instance.objects.get(pk=instance_id)
        if inst.state in states:
            return inst
        time.sleep(0.1)
    log = worker.log_tail() if worker is not None else ""
    raise AssertionError(f"instance {instance_id} stuck in {inst.state}, wanted {sorted(states)}\n{log}")


def wait_for_cards_released(instance_id, timeout: float = 30.0, worker=None) -> None:
    """Poll until the instance holds no card. A failure commits first and frees the cards just after it, through
    the driver and outside that transaction, so a test that saw `failed` must wait for this too."""
    import time

    from inventory.models import CardAllocation

    deadline = time.time() + timeout
    while CardAllocation.objects.filter(holder_id=instance_id, released_at__isnull=True).exists():
        if time.time() > deadline:
            log = worker.log_tail() if worker is not None else ""
            raise AssertionError(f"instance {instance_id} still holds cards after {timeout:g} s\n{log}")
        time.sleep(0.1)
