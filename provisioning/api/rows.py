"""The instance body (SPEC §5) built from plain rows: one builder for the list, the detail and the console.

The list reads `values_list` tuples (no model objects, only the columns the body shows) and builds
each body with `instance_body`; `InstanceSerializer` turns a model instance into the same rows, so
the list and the detail cannot drift apart (tests/provisioning/test_instance_body_golden.py).
"""
from functools import lru_cache
from typing import NamedTuple

from core.money import format_price_per_second, format_ucny

from ..choices import InstanceState, can_transition
from ..endpoints import gateway_entry, ssh_entries
from ..services import hardware_port
from ..services.sla import sla_granted

# States in which a passed SLA deadline means breached even before the outcome is known.
_IN_FLIGHT = frozenset({"pending", "provisioning", "checking", "starting"})
_ACTIONS = (("stop", InstanceState.STOPPING), ("start", InstanceState.STARTING),
            ("terminate", InstanceState.TERMINATING))


class InstanceRow(NamedTuple):
    """The columns of one instance the body shows; the field order is `selectors.INSTANCE_BODY_COLUMNS`."""

    id: object
    name: str
    kind: str
    state: str
    state_reason: str
    items: list
    policy: dict | None
    zone_id: object
    zone_slug: str | None
    image: str
    images: dict
    billing: str
    package_renewal: str
    waitlist: bool
    created_at: object
    ready_at: object
    price_per_hour: int
    sla_deadline: object
    sla_event_id: object
    sla_settled_event_id: object
    sla_compensation: int
    organization_id: object  # its Slurm account (hardware.slurm.account_name)
    # The list's page statement adds these (selectors.instance_list_rows); a model's row leaves them unset.
    group_rows: list | None = None
    dark: list | None = None
    health: list | None = None
    volumes: list | None = None
    datasets: list | None = None
    cost: int = 0
    package: dict | None = None
    now: str | None = None  # the database clock of the page's statement, as text

    @property
    def pk(self):
        return self.id


class GroupRow(NamedTuple):
    """One live node group with the node columns the body shows; after the instance id, the order of the list's
    group arrays (`selectors._GROUPS`)."""

    instance_id: object
    item_index: int
    accelerator: str
    card_indices: list
    state: str
    node_id: int
    hostname: str
    ssh_host: str
    ssh_port: int
    container_port: int | None
    card_count: int
    vendor: str


def row_of(instance) -> InstanceRow:
    """A model Instance as a row (the detail and console path)."""
    return InstanceRow(
        instance.pk, instance.name, instance.kind, instance.state, instance.state_reason, instance.items,
        instance.policy, instance.zone_id, instance.zone.slug if instance.zone_id else None, instance.image,
        instance.images, instance.billing, instance.package_renewal, instance.waitlist, instance.created_at,
        instance.ready_at, instance.price_per_hour, instance.sla_deadline, instance.sla_event_id,
        instance.sla_settled_event_id, instance.sla_compensation, instance.organization_id)


def group_row_from(instance_id, columns) -> GroupRow:
    """A row from one element of the page query's group array (selectors._GROUPS)."""
    return GroupRow(instance_id, *columns)


def group_row_of(group) -> GroupRow:
    """A model NodeGroup (node and accelerator loaded) as a row."""
    node = group.node
    return GroupRow(group.instance_id, group.item_index, group.accelerator, group.card_indices, group.state,
                    group.node_id, node.hostname, node.ssh_host, node.ssh_port, group.ssh_port, node.card_count,
                    node.accelerator.vendor)


@lru_cache(maxsize=32)
def _actions(state: str) -> tuple:
    # What the transition table allows now (the console shows only these buttons).
    return tuple(name for name, target in _ACTIONS if can_transition(state, target))


@lru_cache(maxsize=1024)
def _per_second(price_per_hour: int) -> str:
    # Decimal arithmetic per row was a visible share of the list; prices repeat across rows.
    return format_price_per_second(price_per_hour)


def _slurm_partition(row: InstanceRow, groups) -> dict | None:
    if len({g.vendor for g in groups}) < 2:  # hardware_port answers None for anything but a hybrid
        return None
    parts = [hardware_port.SlurmPart(g.hostname, g.card_count, g.vendor, len(g.card_indices)) for g in groups]
    return hardware_port.slurm_partition(instance_id=row.id, organization_id=row.organization_id, kind=row.kind,
                                         parts=parts)


def _package(package) -> dict | None:
    # The latest period of a monthly instance (None before it first ran, and for on-demand instances).
    if package is None:
        return None
    return {"period": package.period, "state": package.state, "starts_at": package.starts_at,
            "ends_at": package.ends_at, "renewal": package.renewal}


@lru_cache(maxsize=1024)
def _money(amount: int) -> str:
    # Rates and prices repeat across rows.
    return format_ucny(amount)


def instance_body(row: InstanceRow, groups, *, costs: dict, positions: dict, now, packages: dict,
                  notices: dict, storage: dict) -> dict:
    """The instance body from its row and its live group rows (ordered by item index, id), with the per-row
    figures from the page's dicts by instance id."""
    pk = row.id
    nodes = [{"node": g.hostname, "item_index": g.item_index, "accelerator": g.accelerator,
              "cards": g.card_indices, "state": g.state} for g in groups]
    ssh = ssh_entries(row.kind, groups)
    state, deadline = row.state, row.sla_deadline
    if deadline is None:
        breached = False
    elif state in _IN_FLIGHT:
        # On the way to running the current window has no ready_at yet (one left from an earlier run
        # is not this window's): late once the deadline has passed.
        breached = now is not None and now > deadline
    elif state == InstanceState.FAILED:
        # Failed on the way to running (ready_at cleared by every start), or after this window was met: a node that
        # went dark past its timeout (services/dark.py).
        breached = row.ready_at is None or row.ready_at > deadline
    elif row.ready_at is not None:
        breached = row.ready_at > deadline
    else:
        breached = False
    granted = sla_granted(row)
    price = int(row.price_per_hour)
    stored = storage.get(pk, {})
    return {
        "id": str(row.id),
        "name": row.name,
        "kind": row.kind,
        "state": state,
        "state_reason": row.state_reason,
        "items": [{"accelerator": it["accelerator"], "count": it["count"],
                   "price_per_card_hour": _money(int(it["rate"]))} for it in row.items],
        "policy": row.policy,
        "zone": row.zone_slug,
        "nodes": nodes,
        "image": row.image or None,
        "images": row.images,
        "billing": row.billing,
        "package_renewal": row.package_renewal,
        "package": _package(packages.get(pk)),
        "waitlist": row.waitlist,
        "created_at": row.created_at,
        "ready_at": row.ready_at,
        "price_per_hour": _money(price),
        "price_per_second": _per_second(price),
        "cost_so_far": format_ucny(int(costs.get(pk, 0))),
        "ssh": ssh,
        "ssh_gateway": gateway_entry(row.id, row.name, ssh),  # one address for the fleet (provisioning/gateway/)
        "sla": {"deadline": deadline, "breached": breached or granted > 0,  # granted: services/sla.py
                "compensation": format_ucny(granted) if granted else None},
        "waitlist_position": positions.get(pk),
        "slurm_partition": _slurm_partition(row, groups) if len(groups) > 1 else None,
        "actions": list(_actions(state)),
        "notices": notices.get(pk, []),  # e.g. its node stopped answering (provisioning/notices.py)
        # storage: attached volumes (mount path, size, usage, price) and read-only datasets (storage_port.py)
        "volumes": stored.get("volumes", []),
        "datasets": stored.get("datasets", []),
    }
