"""Signing secrets: generated as Standard Webhooks `whsec_…` strings, kept Fernet-encrypted at rest."""
import base64
import hashlib
import secrets

from cryptography.fernet import Fernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _fernet() -> Fernet:
    key = settings.WEBHOOK_SECRETS_KEY
    if not key:
        if settings.CARDMIX_ENV == "production":
            raise ImproperlyConfigured("WEBHOOK_SECRETS_KEY is required to store webhook secrets.")
        # Development only: derived from SECRET_KEY so the demo works without setup.
        key = base64.urlsafe_b64encode(hashlib.sha256(b"webhooks:" + settings.SECRET_KEY.encode()).digest())
    return Fernet(key)


def secret_generate() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def secret_encrypt(secret: str) -> bytes:
    return _fernet().encrypt(secret.encode())


def secret_decrypt(ciphertext) -> str:
    return _fernet().decrypt(bytes(ciphertext)).decode()
