"""Identification numbers at rest: Fernet with REALNAME_KEY (derived from SECRET_KEY outside production)."""
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from core.fernet_keys import fernet_for


def _fernet() -> Fernet:
    return fernet_for(key=settings.REALNAME_KEY, setting="REALNAME_KEY", purpose="realname")


def id_number_seal(number: str) -> bytes:
    return _fernet().encrypt(number.encode())


def id_number_unseal(sealed: bytes) -> str:
    """The number; ValueError when REALNAME_KEY does not open it (never logs the data)."""
    try:
        return _fernet().decrypt(bytes(sealed)).decode()
    except InvalidToken:
        raise ValueError("An identification number cannot be decrypted with the configured REALNAME_KEY") from None
