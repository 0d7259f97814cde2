"""Roles of a membership (SPEC §2, matrix in §5)."""
from django.db import models
from django.utils.translation import gettext_lazy, pgettext_lazy


class Role(models.TextChoices):
    OWNER = "owner", gettext_lazy('Owner')
    ADMIN = "admin", gettext_lazy('Admin')
    MEMBER = "member", gettext_lazy('Member')
    BILLING = "billing", pgettext_lazy("role", "Billing")  # not the nav's Billing (账单): the finance role
    VIEWER = "viewer", gettext_lazy('Viewer')
