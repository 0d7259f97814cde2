"""Fernet encryption of BMC passwords at rest; the key comes from the environment (BMC_CREDENTIALS_KEY)."""
import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _fernet() -> Fernet:
    key = settings.BMC_CREDENTIALS_KEY
    if not key:
        if settings.CARDMIX_ENV == "production":
            raise ImproperlyConfigured("BMC_CREDENTIALS_KEY is required to store BMC credentials.")
        # Development only: a key derived from SECRET_KEY, so the demo works without setup.
        key = base64.urlsafe_b64encode(hashlib.sha256(b"bmc:" + settings.SECRET_KEY.encode()).digest())
    return Fernet(key)


def bmc_encrypt(password: str) -> bytes:
    """Ciphertext of a BMC password."""
    return _fernet().encrypt(password.encode())


def bmc_decrypt(ciphertext: bytes) -> str:
    """The BMC password; raises ValueError when the key does not match (never logs the data)."""
    try:
        return _fernet().decrypt(bytes(ciphertext)).decode()
    except InvalidToken:
        raise ValueError("BMC credential cannot be decrypted with the configured BMC_CREDENTIALS_KEY") from None
