"""Signing secrets: generated as Standard Webhooks `whsec_…` strings, kept Fernet-encrypted at rest."""
import base64
import secrets

from cryptography.fernet import Fernet
from django.conf import settings

from core.fernet_keys import fernet_for


def _fernet() -> Fernet:
    return fernet_for(key=settings.WEBHOOK_SECRETS_KEY, setting="WEBHOOK_SECRETS_KEY", purpose="webhooks")


def secret_generate() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def secret_encrypt(secret: str) -> bytes:
    return _fernet().encrypt(secret.encode())


def secret_decrypt(ciphertext) -> str:
    return _fernet().decrypt(bytes(ciphertext)).decode()
