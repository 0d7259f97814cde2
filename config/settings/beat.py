"""Periodic tasks: Celery beat's whole schedule in one table, with the intervals an operator may change."""
from core.settings_registry import section, setting

from .billing import METER_TICK_SECONDS

section("Periodic tasks", "How often Celery beat runs the jobs whose interval an operator may change, in seconds "
        "(the billing meter's tick is `METER_TICK_SECONDS`; the other jobs have fixed intervals, listed in "
        "`config/settings/beat.py`).")

CELERY_BEAT_SCHEDULE: dict = {
    "worker-heartbeat": {"task": "core.worker_heartbeat", "schedule": 60.0},
    "purge-idempotency-records": {"task": "core.purge_idempotency_records", "schedule": 3600.0},
    # Payments: find intents whose webhook never came (billing/payments).
    "payments-reconcile": {"task": "billing.payments_reconcile", "schedule": setting(
        "STRIPE_RECONCILE_SECONDS", "float", 600.0, "payment reconciliation with Stripe")},
    # The ledger: meters, trial expiry, verification.
    "billing-meter-tick": {"task": "billing.meter_tick", "schedule": float(METER_TICK_SECONDS)},
    "billing-trial-expiry": {"task": "billing.trial_expiry", "schedule": 300.0},
    "billing-verify-ledger": {"task": "billing.verify_ledger", "schedule": setting(
        "LEDGER_VERIFY_SECONDS", "float", 3600.0, "incremental ledger verification (`VERIFY_SETTLE_SECONDS`)")},
    # Billing products: packages and invoices.
    "billing-package-renewals": {"task": "billing.package_renewals", "schedule": 60.0},
    "billing-invoices-issue": {"task": "billing.invoices_issue", "schedule": 3600.0},
    "billing-invoices-settle": {"task": "billing.invoices_settle", "schedule": 300.0},
    # Storage: volume retention, and the simulated storage driver's usage figures (zones of simulated nodes only:
    # agents report their own).
    "storage-retention": {"task": "storage.volumes_retention", "schedule": 600.0},
    "storage-simulated-usage": {"task": "storage.volumes_usage_simulate", "schedule": 60.0},
    # Placement index (SPEC §13): each worker reads only the nodes changed since its last decision from the change
    # log (inventory.PlacementChange), pruned here.
    "inventory-placement-changes-prune": {"task": "inventory.placement_changes_prune", "schedule": 300.0},
    # Provisioning: SLA, reconciler, waitlist, expiry, warm pools, health.
    "provisioning-sla-settle": {"task": "provisioning.sla_settle_due", "schedule": 60.0},
    "provisioning-reconcile": {"task": "provisioning.reconcile", "schedule": setting(
        "RECONCILE_SECONDS", "float", 60.0,
        "the reconciler: stuck instances are finished or rolled back, leaked cards released and leaked meters closed")},
    "provisioning-waitlist-wake": {"task": "provisioning.waitlist_wake", "schedule": 60.0},
    "provisioning-expire-due": {"task": "provisioning.expire_due", "schedule": 300.0},
    "provisioning-warm-pools": {"task": "provisioning.warm_pools_refill", "schedule": setting(
        "WARM_POOL_REFILL_SECONDS", "float", 60.0,
        "warm pools are refilled and stale nodes re-verified (`WARM_POOL_MAX_AGE_HOURS`)")},
    # Health incidents (provisioning/services/health_sweep.py): complete what a failed card-health listener left undone.
    "provisioning-health-incidents": {"task": "provisioning.health_incidents_sweep", "schedule": setting(
        "HEALTH_SWEEP_SECONDS", "float", 60.0,
        "card health incidents (and their billing splits) a failed listener left undone are completed")},
    # Broker outages: the transactional outbox's drain (core/outbox.py).
    "core-outbox-drain": {"task": "core.outbox_drain", "schedule": setting(
        "OUTBOX_DRAIN_SECONDS", "float", 10.0, "the transactional outbox publishes the task dispatches a broker outage held back")},
    # Hardware: agents' heartbeats, and the instances of nodes that went dark.
    "hardware-agent-heartbeats": {"task": "hardware.heartbeats_check", "schedule": setting(
        "AGENT_HEARTBEAT_CHECK_SECONDS", "float", 30.0,
        "nodes whose agent stopped beating are marked unreachable (`AGENT_HEARTBEAT_TIMEOUT_SECONDS`)")},
    "provisioning-dark-sweep": {"task": "provisioning.instances_dark_sweep", "schedule": setting(
        "NODE_DARK_SWEEP_SECONDS", "float", 30.0, "unreachable nodes' instances are failed or moved (`NODE_DARK_*`)")},
    # Webhooks: deliveries due for another attempt.
    "webhooks-retry-due": {"task": "webhooks.retry_due", "schedule": 15.0},
}
