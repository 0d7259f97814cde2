"""Fernet encryption of BMC passwords at rest; the key comes from the environment (BMC_CREDENTIALS_KEY)."""
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from core.fernet_keys import fernet_for


def _fernet() -> Fernet:
    return fernet_for(key=settings.BMC_CREDENTIALS_KEY, setting="BMC_CREDENTIALS_KEY", purpose="bmc")


def bmc_encrypt(password: str) -> bytes:
    """Ciphertext of a BMC password."""
    return _fernet().encrypt(password.encode())


def bmc_decrypt(ciphertext: bytes) -> str:
    """The BMC password; raises ValueError when the key does not match (never logs the data)."""
    try:
        return _fernet().decrypt(bytes(ciphertext)).decode()
    except InvalidToken:
        raise ValueError("BMC credential cannot be decrypted with the configured BMC_CREDENTIALS_KEY") from None
