"""Instance kinds, billing modes, states and the one transition table (SPEC §3)."""
from django.db import models
from django.utils.translation import gettext_lazy


class InstanceKind(models.TextChoices):
    CONTAINER = "container", gettext_lazy('Container')
    BARE_METAL = "bare_metal", gettext_lazy('Bare Metal')


class BillingMode(models.TextChoices):
    ON_DEMAND = "on_demand", gettext_lazy('On Demand')
    MONTHLY = "monthly", gettext_lazy('Monthly')


class PackageRenewal(models.TextChoices):
    RENEW = "renew", gettext_lazy('Renew')
    ON_DEMAND = "on_demand", gettext_lazy('On Demand')
    STOP = "stop", gettext_lazy('Stop')


class InstanceState(models.TextChoices):
    PENDING = "pending", gettext_lazy('Pending')
    WAITLISTED = "waitlisted", gettext_lazy('Waitlisted')
    PROVISIONING = "provisioning", gettext_lazy('Provisioning')
    CHECKING = "checking", gettext_lazy('Checking')
    RUNNING = "running", gettext_lazy('Running')
    STOPPING = "stopping", gettext_lazy('Stopping')
    STOPPED = "stopped", gettext_lazy('Stopped')
    STARTING = "starting", gettext_lazy('Starting')
    TERMINATING = "terminating", gettext_lazy('Terminating')
    TERMINATED = "terminated", gettext_lazy('Terminated')
    FAILED = "failed", gettext_lazy('Failed')


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
    INTRA_NODE = "intra_node", gettext_lazy('Intra Node')  # nccl-tests / hccl_test over a node group of ≥ 2 cards
    HEALTH = "health", gettext_lazy('Health')  # one-card group: device health check
    INTER_NODE = "inter_node", gettext_lazy('Inter Node')  # all nodes of one vendor in a multi-node instance, against the zone's floor
    REACHABILITY = "reachability", gettext_lazy('Reachability')  # a hybrid: TCP from each part to every other part's cluster address
    SECOND_PASS = "second_pass", gettext_lazy('Second Pass')  # released cards that failed readiness or reported degraded, re-tested once


# The provisioning → checking event of an instance whose nodes all came from the warm pool (services/warm_pool.py).
PROVISIONED_WARM = "provisioned: warm nodes, boot and image skipped"


class WarmState(models.TextChoices):
    PREPARING = "preparing", gettext_lazy('Preparing')  # deployed with the pool's image, then its readiness test
    WARM = "warm", gettext_lazy('Warm')  # verified; counts while its check is younger than WARM_POOL_MAX_AGE_HOURS
    VERIFYING = "verifying", gettext_lazy('Verifying')  # a stale check being run again


class RefillState(models.TextChoices):
    IDLE = "idle", gettext_lazy('Idle')  # full
    REFILLING = "refilling", gettext_lazy('Refilling')  # nodes being prepared or re-verified
    SHORT = "short", gettext_lazy('Short')  # fewer whole free nodes than the pool asks for


class RetestCause(models.TextChoices):
    READINESS_FAILED = "readiness_failed", gettext_lazy('Readiness Failed')
    DEGRADED = "degraded", gettext_lazy('Degraded')
    WARM_CHECK_FAILED = "warm_check_failed", gettext_lazy('Warm Check Failed')  # a warm-pool node's check (no instance)


class RetestState(models.TextChoices):
    PENDING = "pending", gettext_lazy('Pending')
    PASSED = "passed", gettext_lazy('Passed')  # the cards went back to the pool (health ok)
    FAILED = "failed", gettext_lazy('Failed')  # the node was quarantined with both reports


class GroupState(models.TextChoices):
    PLACED = "placed", gettext_lazy('Placed')
    PREPARED = "prepared", gettext_lazy('Prepared')
    CHECKED = "checked", gettext_lazy('Checked')
    FAILED = "failed", gettext_lazy('Failed')
    RELEASED = "released", gettext_lazy('Released')


# The reason prefix of a failure the organization's funds caused, not the platform (a monthly package that could
# not be charged on entering running): the SLA owes nothing for it.
FUNDS_FAILURE = "insufficient_funds"
