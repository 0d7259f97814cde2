"""Real-name verification (实名认证): an organization proves who it is — a person by name and citizen
identification number, a company by name, unified social credit code and business licence — and an operator (or
an automated provider) approves or rejects it.

Imported at the end of tenancy/models.py so Django discovers the model in the `tenancy` app.
"""
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

LICENCE_MAX_BYTES = 10 * 1024 * 1024  # a scanned licence is a few MiB at most


class RealNameKind(models.TextChoices):
    INDIVIDUAL = "individual", _("Individual (个人)")
    ENTERPRISE = "enterprise", _("Enterprise (企业)")


class RealNameState(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class RealNameVerification(models.Model):
    """One submission. The identification number is kept sealed (Fernet, REALNAME_KEY) and shown masked; the
    licence scan is kept in the row, served to operators only."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT,
                                     related_name="real_name_verifications")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    kind = models.CharField(max_length=10, choices=RealNameKind.choices)
    legal_name = models.CharField(max_length=100)  # the person's or the company's registered name
    id_number_sealed = models.BinaryField(null=True, blank=True, editable=False)  # individuals only
    id_number_masked = models.CharField(max_length=18, blank=True, default="")
    credit_code = models.CharField(max_length=18, blank=True, default="")  # enterprises: public, kept plain
    licence = models.BinaryField(null=True, blank=True, editable=False)
    licence_type = models.CharField(max_length=20, blank=True, default="")  # application/pdf, image/png, image/jpeg
    state = models.CharField(max_length=10, choices=RealNameState.choices, default=RealNameState.PENDING)
    reason = models.CharField(max_length=300, blank=True, default="")  # why it was rejected, shown to the customer
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    provider_result = models.JSONField(default=dict, blank=True)  # what an automated check answered, if any
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"], name="realname_org_idx"),
                   models.Index(fields=["state", "created_at"], name="realname_state_idx")]
        constraints = [
            # One submission under review at a time per organization.
            models.UniqueConstraint(fields=["organization"], condition=Q(state="pending"),
                                    name="realname_one_pending_per_org"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} {self.legal_name} ({self.state})"
