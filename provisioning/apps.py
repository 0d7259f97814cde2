from django.apps import AppConfig

from billing.hooks import register_autostop
from billing.products.hooks import register_instance_names, register_package_end
from hardware.hooks import register_card_health_listener, register_heartbeat_listener
from inventory.hooks import register_capacity_listener, register_holder_describer
from storage.hooks import register_volume_listener


def _on_capacity(**_kwargs):
    """inventory freed capacity: wake waitlisted instances in the worker (never in the caller's request).

    Only when something waits: every stop frees cards, and a worker task that finds an empty queue cost ~14 ms of
    a worker per stop (the scale goals, SPEC §13). One waitlisted by a transaction still open now is woken by
    the beat's pass."""
    from .selectors import waitlist_nonempty
    from .tasks import waitlist_wake

    if waitlist_nonempty():
        waitlist_wake.delay()


def _on_autostop(*, org_id, at, reason):
    """billing says the organization's funds run out at `at`: stop its on-demand instances then (now if passed)."""
    from .services.autostop import autostop_schedule

    autostop_schedule(org_id=org_id, at=at, reason=reason)


def _on_package_end(*, instance_id, outcome, at):
    """billing ended a monthly package period: continue on demand or stop (services/packages.py)."""
    from .services.packages import instance_package_ended

    instance_package_ended(instance_id=instance_id, outcome=outcome, at=at)


def _instance_names(*, org_id, ids):
    """billing names instances in its emails (package renewal failures) without importing provisioning."""
    from .selectors import instance_names

    return instance_names(org=org_id, ids=ids)


def _holders_describe(ids):
    """inventory's admin names the instance holding a card, with its organization (links into the admin)."""
    from django.urls import reverse

    from .models import Instance

    rows = Instance.objects.filter(pk__in=ids).values_list("pk", "name", "organization_id", "organization__name")
    return {str(pk): {"name": name, "org": org_name,
                      "url": reverse("admin:provisioning_instance_change", args=[pk]),
                      "org_url": reverse("admin:tenancy_organization_change", args=[org_id])}
            for pk, name, org_id, org_name in rows}


class ProvisioningConfig(AppConfig):
    """Instances, the transition table, placement, drivers, readiness, SLA, waitlist."""

    name = "provisioning"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The lower apps' hook registries (pure modules): they call back into provisioning without importing it.
        register_capacity_listener(_on_capacity)
        register_holder_describer(_holders_describe)
        register_autostop(_on_autostop)
        register_package_end(_on_package_end)
        register_instance_names(_instance_names)
        # Imports models: only once the app registry has loaded.
        from . import metrics  # noqa: F401  (registers the warm pools' scrape-time gauges)
        from .services.health import card_health_heard
        from .services.volume_mounts import heartbeat_volumes, volume_changed

        register_card_health_listener(card_health_heard)  # a failed card: its user told, its time not charged

        register_volume_listener(volume_changed)
        register_heartbeat_listener(heartbeat_volumes)
