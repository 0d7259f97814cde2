"""Account kinds and transfer codes of the ledger (SPEC §4)."""
from django.db import models


class AccountKind(models.TextChoices):
    """Organization accounts hold a customer's money; platform accounts are the other side."""

    CASH = "cash", "Cash"
    TRIAL = "trial", "Trial credit"
    COMPENSATION = "compensation", "Compensation"
    GRANT = "grant", "Grant"
    PAYMENTS_CLEARING = "payments_clearing", "Payments clearing"
    COMPUTE_REVENUE = "compute_revenue", "Compute revenue"
    # The meter tick's own shard of compute revenue: only the tick writes it, so no stop, terminate or package
    # charge (they credit compute_revenue) ever waits for the tick's revenue row.
    TICK_REVENUE = "tick_revenue", "Compute revenue (meter tick)"
    PROMOTIONS = "promotions", "Promotions"
    EXPIRED_CREDIT = "expired_credit", "Expired credit"
    ROUNDING = "rounding", "Rounding"


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

    METER = "meter", "Metered usage"
    TRIAL = "trial", "Trial credit"
    TRIAL_EXPIRY = "trial_expiry", "Trial credit expired"
    SLA = "sla", "SLA compensation"
    TOPUP = "topup", "Top-up"
    REFUND = "refund", "Refund"
    GRANT = "grant", "Sponsorship grant"
    PACKAGE = "package", "Monthly package"
    ROUNDING = "rounding", "Rounding"
    ADJUSTMENT = "adjustment", "Adjustment"
    NODE_DARK = "node_dark", "Unreachable node credit"
    HEALTH_INCIDENT = "health_incident", "Failed card credit"

class MeterSubject(models.TextChoices):
    """What a meter charges for (storage volumes reuse the meters: the same tick, the same floor deltas)."""

    INSTANCE = "instance", "Instance item"
    VOLUME = "volume", "Storage volume"
    IMAGE = "image", "Saved image"  # instance_id = the custom image's id, cards = its size in GiB (storage)


# What an instance billing stops (auto-stop, a package that did not renew) keeps, for its emails: only its volumes
# (storage), which stay billed until deleted. Billing knows no instance kind, so it names both; provisioning/
# stop_keeps.py says the same per kind and names the volumes.
STOP_KEEPS_NOTHING = ("A stop keeps nothing but the volumes attached to an instance (they stay billed until deleted): "
                      "a container is deleted with the rest of its disk, and a bare-metal instance's nodes are wiped.")
