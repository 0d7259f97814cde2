"""Billing products (SPEC §4 Charging): monthly packages, postpaid invoices, sponsorship proposals.

Imported at the end of billing/models.py so Django discovers these models in the `billing` app.
Instances are referenced by plain UUID: billing sits below provisioning and never imports it.
"""
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy

# A package is 30 days = 720 hours at the monthly rate.
PACKAGE_HOURS = 720
PACKAGE_DAYS = 30


class PackageRenewal(models.TextChoices):
    """What happens when a package period ends."""

    RENEW = "renew", gettext_lazy('Renew')
    ON_DEMAND = "on_demand", gettext_lazy('On Demand')
    STOP = "stop", gettext_lazy('Stop')


class PackageState(models.TextChoices):
    """A period is active until the renewal task ends it."""

    ACTIVE = "active", gettext_lazy('Active')
    ENDED = "ended", gettext_lazy('Ended')


class PackageOutcome(models.TextChoices):
    """How an ended period was followed up (what the package-end hook was told)."""

    RENEWED = "renewed", gettext_lazy('Renewed')
    ON_DEMAND = "on_demand", gettext_lazy('On Demand')
    STOP = "stop", gettext_lazy('Stop')


class Package(models.Model):
    """One 30-day period of a monthly package of one instance, charged in full when it starts."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="packages")
    instance_id = models.UUIDField(db_index=True)  # plain id: provisioning sits above billing
    period = models.PositiveIntegerField(default=1)  # 1 for the first period, +1 per renewal
    # [{"accelerator": slug, "cards": n, "rate": µCNY per card-hour (monthly rate, locked)}]
    items = models.JSONField()
    rate_per_hour = models.BigIntegerField()  # Σ rate × cards, µCNY per hour
    amount = models.BigIntegerField()  # PACKAGE_HOURS × rate_per_hour, µCNY, charged with key package:<id>
    renewal = models.CharField(max_length=10, choices=PackageRenewal.choices, default=PackageRenewal.STOP)
    state = models.CharField(max_length=10, choices=PackageState.choices, default=PackageState.ACTIVE)
    outcome = models.CharField(max_length=10, choices=PackageOutcome.choices, blank=True, default="")
    # Why a renewal fell back to stop (e.g. "insufficient_funds"); shown to the customer.
    notice = models.CharField(max_length=300, blank=True, default="")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()  # compared with the database clock by the renewal task
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at", "-period"]
        constraints = [
            # Charging twice for the same running transition is impossible: one row per period.
            models.UniqueConstraint(fields=["instance_id", "period"], name="package_unique_instance_period"),
            models.UniqueConstraint(fields=["instance_id"], condition=Q(state="active"),
                                    name="package_one_active_per_instance"),
            models.CheckConstraint(condition=Q(amount__gt=0) & Q(rate_per_hour__gt=0) & Q(period__gte=1),
                                   name="package_amount_positive"),
        ]
        indexes = [
            models.Index(fields=["ends_at"], condition=Q(state="active"), name="package_due_idx"),
            models.Index(fields=["organization", "-starts_at"], name="package_org_idx"),
        ]

    def __str__(self):
        return f"package {self.id} ({self.instance_id} period {self.period})"


class InvoiceState(models.TextChoices):
    """Open until paid, or superseded by the next month's invoice (which includes its unpaid debt)."""

    OPEN = "open", gettext_lazy('Open')
    PAID = "paid", gettext_lazy('Paid')
    SUPERSEDED = "superseded", gettext_lazy('Superseded')


class Invoice(models.Model):
    """A postpaid organization's monthly invoice: what its cash was below zero at the month's end (all debt so
    far: at most one invoice of an organization is open, a newer one supersedes older open ones)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="invoices")
    period = models.DateField()  # first day of the month, in BILLING_TIME_ZONE
    amount_due = models.BigIntegerField()  # µCNY, exact (not rounded)
    state = models.CharField(max_length=10, choices=InvoiceState.choices, default=InvoiceState.OPEN)
    # The top-up that pays it (payments' TopUp id, plain: payments rows are not ours to constrain).
    topup_id = models.UUIDField(null=True, blank=True, db_index=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-period"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "period"], name="invoice_unique_org_period"),
            models.CheckConstraint(condition=Q(amount_due__gte=0), name="invoice_amount_due_gte0"),
        ]

    def __str__(self):
        return f"invoice {self.organization_id} {self.period:%Y-%m}"


class SponsorshipState(models.TextChoices):
    """Operators decide once."""

    SUBMITTED = "submitted", gettext_lazy('Submitted')
    APPROVED = "approved", gettext_lazy('Approved')
    REJECTED = "rejected", gettext_lazy('Rejected')


class SponsorshipProposal(models.Model):
    """A customer's request for sponsored card-hours; approval grants them at list price into `grant`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="sponsorships")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    title = models.CharField(max_length=200)
    abstract = models.TextField(max_length=5000)
    accelerator = models.CharField(max_length=40)  # accelerator slug
    card_hours = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=SponsorshipState.choices, default=SponsorshipState.SUBMITTED)
    staff_note = models.TextField(blank=True, default="")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    # µCNY granted (card_hours × on-demand list price at approval), key grant:<id>.
    granted_amount = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"], name="sponsorship_org_idx")]
        constraints = [models.CheckConstraint(condition=Q(card_hours__gt=0), name="sponsorship_card_hours_gt0")]

    def __str__(self):
        return f"{self.title} ({self.state})"


__all__ = ["PACKAGE_DAYS", "PACKAGE_HOURS", "Invoice", "InvoiceState", "Package", "PackageOutcome",
           "PackageRenewal", "PackageState", "SponsorshipProposal", "SponsorshipState"]
