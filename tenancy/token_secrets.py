"""API token secrets: `cmx_` + 32 random bytes (url-safe base64); only their sha256 is stored."""
import hashlib
import secrets as _secrets

TOKEN_PREFIX = "cmx_"
PREFIX_DISPLAY_LEN = 12  # "cmx_" + 8 characters: enough to tell tokens apart, useless to guess


def token_generate() -> str:
    """A new secret: `cmx_` + 43 url-safe characters (256 random bits)."""
    return TOKEN_PREFIX + _secrets.token_urlsafe(32)


def token_hash(secret: str) -> str:
    """Hex sha256 of the whole secret (tokens are high-entropy, so no salt or slow hash is needed)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def token_display_prefix(secret: str) -> str:
    """What the console and the API show of a token after creation."""
    return secret[:PREFIX_DISPLAY_LEN]
