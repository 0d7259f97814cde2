"""Shared checks: SLA transfers, leaks, and moving stored deadlines."""
from datetime import timedelta

from billing.models import Meter, Transfer
from inventory.models import CardAllocation
from provisioning.choices import HOLDING_STATES
from provisioning.choices import InstanceState as S
from provisioning.models import Instance

URL = "/api/v1/instances/"
WORKER_ENV = {"SIMULATOR_DELAY_SCALE": "0", "SIMULATOR_FAILURE_SCALE": "0"}
H100_RATE = 1_900_000  # µCNY per card-hour, the seeded on-demand price


def sla_transfers(instance: Instance):
    """The ledger's compensation transfers for the instance's current breach id."""
    return list(Transfer.objects.filter(key=f"sla:{instance.sla_event_id}"))


def move(instance_id, **deltas) -> Instance:
    """Shift stored deadlines, e.g. move(iid, sla_deadline=-timedelta(hours=1)); returns the fresh row."""
    inst = Instance.objects.get(pk=instance_id)
    Instance.objects.filter(pk=instance_id).update(**{f: getattr(inst, f) + d for f, d in deltas.items()})
    return Instance.objects.get(pk=instance_id)


def set_ago(instance_id, **agos) -> Instance:
    """Set stored deadlines to the database clock minus a span, e.g. set_ago(iid, sla_deadline=HOUR)."""
    from core.dbclock import db_now

    now = db_now()
    Instance.objects.filter(pk=instance_id).update(**{f: now - ago for f, ago in agos.items()})
    return Instance.objects.get(pk=instance_id)


def leaks() -> dict:
    """Live allocations held by instances that are not live, and open meters of instances not running."""
    live = set(Instance.objects.filter(state__in=HOLDING_STATES | {S.TERMINATING}).values_list("pk", flat=True))
    running = set(Instance.objects.filter(state=S.RUNNING).values_list("pk", flat=True))
    cards = [a.holder_id for a in CardAllocation.objects.filter(released_at__isnull=True) if a.holder_id not in live]
    meters = [m.instance_id for m in Meter.objects.filter(closed_at__isnull=True) if m.instance_id not in running]
    return {"cards": cards, "meters": meters}


def hours(n: int, cards: int, rate: int = H100_RATE) -> int:
    return n * cards * rate


SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


def retests_run() -> list[str]:
    """Run every pending second pass here (services/retest.py), as the worker's card_retest task does."""
    from provisioning.models import CardRetest
    from provisioning.services.retest import card_retest_run

    return [card_retest_run(retest_id=pk) for pk in CardRetest.objects.filter(state="pending").values_list("pk", flat=True)]
