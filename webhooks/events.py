"""The event types an organization can subscribe its webhook endpoints to (Standard Webhooks `type`)."""

EVENT_TYPES: dict[str, str] = {
    "instance.running": "An instance passed readiness and is running (billing started).",
    "instance.failed": "An instance failed (provisioning, readiness or hardware).",
    "instance.stopped": "An instance stopped (by a user, auto-stop or a package end).",
    "instance.terminated": "An instance was terminated and its cards released.",
    "instance.sla_breached": "An instance missed its readiness deadline; compensation was credited.",
    "instance.card_failed": "A card under a running instance failed; it is not charged from then (`failed_at`).",
    "waitlist.woken": "A waitlisted instance found capacity and is being provisioned.",
    "balance.low": "The organization's available funds fell below the warning threshold.",
    "balance.exhausted": "The organization's funds ran out; running instances are being stopped.",
    "volume.deletion_scheduled": "An unpaid volume will be deleted at `deletion_at` (sent 7 days and 1 day before).",
}
