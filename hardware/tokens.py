"""Node agent tokens: `cmxn_` + 32 random bytes; only the sha256 is stored (like API tokens, other prefix)."""
import secrets as _secrets

from tenancy.token_secrets import token_hash

NODE_TOKEN_PREFIX = "cmxn_"
PREFIX_DISPLAY_LEN = 13  # "cmxn_" + 8 characters


def node_token_generate() -> str:
    """A new node token secret (256 random bits)."""
    return NODE_TOKEN_PREFIX + _secrets.token_urlsafe(32)


def node_token_hash(secret: str) -> str:
    """Hex sha256 of the whole secret."""
    return token_hash(secret)


ENROLL_SECRET_PREFIX = "cmxe_"


def node_enroll_secret_generate() -> str:
    """A one-time enrollment secret (256 random bits) the deploy path hands a freshly imaged node."""
    return ENROLL_SECRET_PREFIX + _secrets.token_urlsafe(32)
