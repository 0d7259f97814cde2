"""Fapiao (发票) requests: an organization asks for a 普通 or 专用 fapiao over what it paid; operators issue it
with the PDF, or reject it with a reason.

Imported at the end of billing/models.py so Django discovers these models in the `billing` app.
"""
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy

from .models_payments import UCNY_PER_FEN

PDF_MAX_BYTES = 10 * 1024 * 1024  # an e-fapiao PDF is ~100 KiB; a scan stays far below this


class FapiaoKind(models.TextChoices):
    NORMAL = "normal", gettext_lazy("普通发票 (general VAT fapiao)")
    SPECIAL = "special", gettext_lazy("增值税专用发票 (special VAT fapiao)")


class FapiaoState(models.TextChoices):
    REQUESTED = "requested", gettext_lazy('Requested')
    ISSUED = "issued", gettext_lazy('Issued')
    REJECTED = "rejected", gettext_lazy('Rejected')
    CANCELLED = "cancelled", gettext_lazy('Cancelled')


# What still counts against what was paid: a rejected or cancelled request gives its amount back.
COUNTED_STATES = (FapiaoState.REQUESTED, FapiaoState.ISSUED)


class FapiaoRequest(models.Model):
    """One fapiao asked for: the buyer's details as the organization typed them, the amount (whole fen), and what
    the operator did. The issued PDF is kept in the row (small, and served only through tenant-scoped views)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="fapiao")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    kind = models.CharField(max_length=10, choices=FapiaoKind.choices)
    amount = models.BigIntegerField(help_text=gettext_lazy("µCNY, a whole number of fen"))
    title = models.CharField(max_length=100)  # 抬头: the buyer's name
    taxpayer_id = models.CharField(max_length=18, blank=True, default="")  # 纳税人识别号 (USCC)
    address = models.CharField(max_length=200, blank=True, default="")
    phone = models.CharField(max_length=30, blank=True, default="")
    bank_name = models.CharField(max_length=100, blank=True, default="")
    bank_account = models.CharField(max_length=40, blank=True, default="")
    email = models.EmailField(blank=True, default="")  # where the operator sends the e-fapiao too
    note = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=10, choices=FapiaoState.choices, default=FapiaoState.REQUESTED)
    number = models.CharField(max_length=20, blank=True, default="")  # 发票号码, set at issue
    pdf = models.BinaryField(null=True, blank=True, editable=False)
    reason = models.CharField(max_length=300, blank=True, default="")  # why it was rejected
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    # A refund after issue: the part of this fapiao that must be reversed with a red-letter (红字) fapiao.
    red_letter_amount = models.BigIntegerField(default=0)
    red_letter_flagged_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"], name="fapiao_org_idx"),
                   models.Index(fields=["state", "created_at"], name="fapiao_state_idx")]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="fapiao_amount_positive"),
            models.CheckConstraint(condition=Q(amount__gte=models.F("red_letter_amount")) & Q(red_letter_amount__gte=0),
                                   name="fapiao_red_letter_within_amount"),
        ]

    def __str__(self):
        return f"fapiao {self.title} ({self.state})"

    @property
    def amount_is_whole_fen(self) -> bool:
        return self.amount % UCNY_PER_FEN == 0


__all__ = ["COUNTED_STATES", "PDF_MAX_BYTES", "FapiaoKind", "FapiaoRequest", "FapiaoState"]
