"""Account kinds and transfer codes of the ledger (SPEC §4)."""
from django.db import models
from django.utils.translation import gettext_lazy


class AccountKind(models.TextChoices):
    """Organization accounts hold a customer's money; platform accounts are the other side."""

    CASH = "cash", gettext_lazy("Cash")
    TRIAL = "trial", gettext_lazy("Trial credit")
    COMPENSATION = "compensation", gettext_lazy("Compensation")
    GRANT = "grant", gettext_lazy("Grant")
    PAYMENTS_CLEARING = "payments_clearing", gettext_lazy("Payments clearing")
    COMPUTE_REVENUE = "compute_revenue", gettext_lazy("Compute revenue")
    # The meter tick's own shard of compute revenue: only the tick writes it, so no stop, terminate or package
    # charge (they credit compute_revenue) ever waits for the tick's revenue row.
    TICK_REVENUE = "tick_revenue", gettext_lazy("Compute revenue (meter tick)")
    PROMOTIONS = "promotions", gettext_lazy("Promotions")
    EXPIRED_CREDIT = "expired_credit", gettext_lazy("Expired credit")
    ROUNDING = "rounding", gettext_lazy("Rounding")


ORG_KINDS = (AccountKind.TRIAL, AccountKind.COMPENSATION, AccountKind.GRANT, AccountKind.CASH)
# Spending order (SPEC §4): trial → compensation → grant → cash.
SPEND_ORDER = ORG_KINDS
# Credits that may never go below zero (a CHECK constraint); cash may, down to the credit limit.
NON_NEGATIVE_KINDS = (AccountKind.TRIAL, AccountKind.COMPENSATION, AccountKind.GRANT)
# Platform accounts have fixed negative ids, so that locking every account in pk order
# always takes the platform rows first (one global lock order, no deadlocks).
PLATFORM_IDS = {
    AccountKind.PAYMENTS_CLEARING: -1,
    AccountKind.COMPUTE_REVENUE: -2,
    AccountKind.PROMOTIONS: -3,
    AccountKind.EXPIRED_CREDIT: -4,
    AccountKind.ROUNDING: -5,
    AccountKind.TICK_REVENUE: -6,
}
# Where metered charges are credited: spends into compute_revenue, the tick into its shard.
REVENUE_KINDS = (AccountKind.COMPUTE_REVENUE, AccountKind.TICK_REVENUE)


class TransferCode(models.TextChoices):
    """Why money moved."""

    METER = "meter", gettext_lazy("Metered usage")
    TRIAL = "trial", gettext_lazy("Trial credit")
    TRIAL_EXPIRY = "trial_expiry", gettext_lazy("Trial credit expired")
    SLA = "sla", gettext_lazy("SLA compensation")
    TOPUP = "topup", gettext_lazy("Top-up")
    REFUND = "refund", gettext_lazy("Refund")
    GRANT = "grant", gettext_lazy("Sponsorship grant")
    PACKAGE = "package", gettext_lazy("Monthly package")
    ROUNDING = "rounding", gettext_lazy("Rounding")
    ADJUSTMENT = "adjustment", gettext_lazy("Adjustment")
    NODE_DARK = "node_dark", gettext_lazy("Unreachable node credit")
    HEALTH_INCIDENT = "health_incident", gettext_lazy("Failed card credit")

class MeterSubject(models.TextChoices):
    """What a meter charges for (storage volumes reuse the meters: the same tick, the same floor deltas)."""

    INSTANCE = "instance", gettext_lazy("Instance item")
    VOLUME = "volume", gettext_lazy("Storage volume")
    IMAGE = "image", gettext_lazy("Saved image")  # instance_id = the custom image's id, cards = its size in GiB (storage)


# What an instance billing stops (auto-stop, a package that did not renew) keeps, for its emails: only its volumes
# (storage), which stay billed until deleted. Billing knows no instance kind, so it names both; provisioning/
# stop_keeps.py says the same per kind and names the volumes.
STOP_KEEPS_NOTHING = gettext_lazy(
    "A stop keeps nothing but the volumes attached to an instance (they stay billed until deleted): a container is "
    "deleted with the rest of its disk, and a bare-metal instance's nodes are wiped.")
