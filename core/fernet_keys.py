"""Fernet keys for secrets kept at rest (BMC passwords, webhook signing secrets…): the operator's key from the
environment, or in development one derived from SECRET_KEY per purpose, so the demo works without setup."""
import base64
import hashlib

from cryptography.fernet import Fernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def fernet_for(*, key: str, setting: str, purpose: str) -> Fernet:
    """Fernet of `key` (the value of `setting`); required in production, derived from SECRET_KEY otherwise."""
    if not key:
        if settings.CARDMIX_ENV == "production":
            raise ImproperlyConfigured(f"{setting} is required to store {purpose} secrets.")
        key = base64.urlsafe_b64encode(hashlib.sha256(f"{purpose}:".encode() + settings.SECRET_KEY.encode()).digest())
    return Fernet(key)
