"""Parsing and fingerprinting SSH public keys (OpenSSH one-line format) with `cryptography`."""
import base64
import hashlib
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from core.errors import ValidationFailed

RSA_MIN_BITS = 2048
MAX_KEY_CHARS = 16_384


@dataclass(frozen=True)
class ParsedKey:
    key_type: str
    public_key: str  # normalised: "type base64 [comment]"
    fingerprint: str


def _refuse(message: str):
    raise ValidationFailed(message, details={"public_key": [message]})


ACCEPTED_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")


def _blob_type(blob: bytes) -> str | None:
    """The key type a public key blob starts with (a length-prefixed string), or None when it has none."""
    if len(blob) < 4:
        return None
    length = int.from_bytes(blob[:4], "big")
    name = blob[4:4 + length]
    if not 0 < length <= 64 or len(name) != length or not name.isascii():
        return None
    return name.decode()


def fingerprint_of(blob: bytes) -> str:
    """`SHA256:` + base64 of sha256(key blob) without padding, as `ssh-keygen -l` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def ssh_key_parse(text: str) -> ParsedKey:
    """Validate one public key line; ed25519, ecdsa and rsa ≥ 2048 bits only (else ValidationFailed)."""
    text = (text or "").strip()
    if not text:
        _refuse("Paste an SSH public key.")
    if len(text) > MAX_KEY_CHARS:
        _refuse("The public key is too long.")
    if "\n" in text or "\r" in text:
        _refuse("Paste exactly one public key on one line.")
    if any(ch < " " and ch != "\t" or ch == "\x7f" for ch in text):  # e.g. a NUL the database cannot store
        _refuse("The public key contains control characters.")
    if text.startswith("-----BEGIN"):
        _refuse("This looks like a private or PEM key; paste the OpenSSH public key (the .pub file).")
    parts = text.split()
    if len(parts) < 2:
        _refuse("The public key is malformed: expected \"<type> <base64> [comment]\".")
    key_type, b64 = parts[0], parts[1]
    # Say which part is wrong: an unknown type, a body that is not base64, a body of another type, or a damaged one.
    if key_type not in ACCEPTED_TYPES:
        _refuse(f"Key type {key_type[:40]} is not accepted; use ed25519, ecdsa or rsa (≥ {RSA_MIN_BITS} bits).")
    try:
        blob = base64.b64decode(b64, validate=True)
    except ValueError:
        _refuse(f"The key body (the text after {key_type}) is not valid base64: it was probably cut or changed "
                "when copied. Paste the whole line of the .pub file.")
    inner = _blob_type(blob)
    if inner is None:
        _refuse(f"The key body (the text after {key_type}) is not an SSH public key: it was probably cut or "
                "changed when copied. Paste the whole line of the .pub file.")
    if inner != key_type:
        _refuse(f"The key type says {key_type} but its body is a {inner[:40]} key; paste the line unchanged.")
    try:
        key = serialization.load_ssh_public_key(text.encode())
    except Exception:  # cryptography raises ValueError / UnsupportedAlgorithm for junk
        _refuse(f"The {key_type} key body is damaged (truncated, or extra characters): paste the whole line of the "
                ".pub file again.")
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < RSA_MIN_BITS:
            _refuse(f"RSA keys must have at least {RSA_MIN_BITS} bits; this one has {key.key_size}.")
    elif not isinstance(key, (ed25519.Ed25519PublicKey, ec.EllipticCurvePublicKey)):
        _refuse(f"Key type {key_type} is not accepted; use ed25519, ecdsa or rsa (≥ {RSA_MIN_BITS} bits).")
    comment = " ".join(parts[2:])[:200]
    normalised = f"{key_type} {b64}" + (f" {comment}" if comment else "")
    return ParsedKey(key_type=key_type, public_key=normalised, fingerprint=fingerprint_of(blob))
