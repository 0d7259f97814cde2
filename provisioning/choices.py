"""Instance kinds, billing modes, states and the one transition table (SPEC §3)."""
from django.db import models


class InstanceKind(models.TextChoices):
    CONTAINER = "container"
    BARE_METAL = "bare_metal"


class BillingMode(models.TextChoices):
    ON_DEMAND = "on_demand"
    MONTHLY = "monthly"


class PackageRenewal(models.TextChoices):
    RENEW = "renew"
    ON_DEMAND = "on_demand"
    STOP = "stop"


class InstanceState(models.TextChoices):
    PENDING = "pending"
    WAITLISTED = "waitlisted"
    PROVISIONING = "provisioning"
    CHECKING = "checking"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    STARTING = "starting"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


S = InstanceState

# SPEC §3 (plus running → failed / provisioning for a dark node): the only source of truth for which state may follow which. Every change
# goes through provisioning.services.transitions.instance_transition, which checks this table.
INSTANCE_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.PROVISIONING, S.WAITLISTED, S.TERMINATING, S.FAILED}),
    S.WAITLISTED: frozenset({S.PROVISIONING, S.TERMINATING}),
    S.PROVISIONING: frozenset({S.CHECKING, S.PROVISIONING, S.TERMINATING, S.FAILED}),
    S.CHECKING: frozenset({S.RUNNING, S.PROVISIONING, S.TERMINATING, S.FAILED}),
    # Beyond SPEC: its node went dark past NODE_DARK_TIMEOUT_SECONDS (services/dark.py) → failed (cards released,
    # as a provisioning failure) or, for a container, provisioning again on other cards (re-placed).
    S.RUNNING: frozenset({S.STOPPING, S.TERMINATING, S.FAILED, S.PROVISIONING}),
    S.STOPPING: frozenset({S.STOPPED, S.TERMINATING}),
    S.STOPPED: frozenset({S.STARTING, S.TERMINATING}),
    S.STARTING: frozenset({S.PROVISIONING, S.WAITLISTED, S.TERMINATING, S.FAILED}),
    S.FAILED: frozenset({S.TERMINATING}),
    S.TERMINATING: frozenset({S.TERMINATED}),
    S.TERMINATED: frozenset(),
}

# States in which an instance holds cards (for quota and for release on the way out).
HOLDING_STATES = frozenset({S.PROVISIONING, S.CHECKING, S.RUNNING, S.STOPPING})
# States the customer can no longer leave except by terminating.
FINAL_STATES = frozenset({S.TERMINATED})


def can_transition(current: str, target: str) -> bool:
    """Whether the table allows current → target."""
    return target in INSTANCE_TRANSITIONS.get(current, frozenset())


class ReportScope(models.TextChoices):
    INTRA_NODE = "intra_node"  # nccl-tests / hccl_test over a node group of ≥ 2 cards
    HEALTH = "health"  # one-card group: device health check
    INTER_NODE = "inter_node"  # all nodes of one vendor in a multi-node instance, against the zone's floor
    REACHABILITY = "reachability"  # a hybrid: TCP from each part to every other part's cluster address
    SECOND_PASS = "second_pass"  # released cards that failed readiness or reported degraded, re-tested once


# The provisioning → checking event of an instance whose nodes all came from the warm pool (services/warm_pool.py).
PROVISIONED_WARM = "provisioned: warm nodes, boot and image skipped"


class WarmState(models.TextChoices):
    PREPARING = "preparing"  # deployed with the pool's image, then its readiness test
    WARM = "warm"  # verified; counts while its check is younger than WARM_POOL_MAX_AGE_HOURS
    VERIFYING = "verifying"  # a stale check being run again


class RefillState(models.TextChoices):
    IDLE = "idle"  # full
    REFILLING = "refilling"  # nodes being prepared or re-verified
    SHORT = "short"  # fewer whole free nodes than the pool asks for


class RetestCause(models.TextChoices):
    READINESS_FAILED = "readiness_failed"
    DEGRADED = "degraded"
    WARM_CHECK_FAILED = "warm_check_failed"  # a warm-pool node's check (no instance)


class RetestState(models.TextChoices):
    PENDING = "pending"
    PASSED = "passed"  # the cards went back to the pool (health ok)
    FAILED = "failed"  # the node was quarantined with both reports


class GroupState(models.TextChoices):
    PLACED = "placed"
    PREPARED = "prepared"
    CHECKED = "checked"
    FAILED = "failed"
    RELEASED = "released"


# The reason prefix of a failure the organization's funds caused, not the platform (a monthly package that could
# not be charged on entering running): the SLA owes nothing for it.
FUNDS_FAILURE = "insufficient_funds"
