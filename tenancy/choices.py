"""Roles of a membership (SPEC §2, matrix in §5)."""
from django.db import models


class Role(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    BILLING = "billing"
    VIEWER = "viewer"
