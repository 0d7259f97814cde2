"""The platform's own SSH key for each instance.

The SSH gateway and the console's web terminal reach an instance's sshd as the platform, never with a
user's key: an ed25519 pair made for the instance the first time it is prepared, its public half installed
beside the user's keys (the agent writes them all to /root/.ssh/authorized_keys), its private half kept
Fernet-encrypted in the row (PLATFORM_KEYS_KEY). One pair per instance, so one instance's key opens no other.
"""
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings

from core.fernet_keys import fernet_for

from .models import Instance

COMMENT = "cardmix-platform"


def _fernet() -> Fernet:
    return fernet_for(key=settings.PLATFORM_KEYS_KEY, setting="PLATFORM_KEYS_KEY", purpose="platform-ssh")


def _new_private_key() -> str:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()).decode()


def platform_private_key(instance: Instance) -> str:
    """The instance's private key in OpenSSH format, made (once, even under concurrent callers) when missing."""
    if not instance.platform_key:
        sealed = _fernet().encrypt(_new_private_key().encode()).decode()
        # First writer wins; a concurrent caller reads the winner's key back.
        Instance.objects.filter(pk=instance.pk, platform_key="").update(platform_key=sealed)
        instance.platform_key = Instance.objects.values_list("platform_key", flat=True).get(pk=instance.pk)
    try:
        return _fernet().decrypt(instance.platform_key.encode()).decode()
    except InvalidToken:
        raise ValueError("the instance's platform key cannot be decrypted with the configured "
                         "PLATFORM_KEYS_KEY") from None


def platform_public_key(instance: Instance) -> str:
    """The `ssh-ed25519 AAAA… cardmix-platform` line installed on the instance."""
    key = serialization.load_ssh_private_key(platform_private_key(instance).encode(), password=None)
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{line.decode()} {COMMENT}"


def authorized_keys(instance: Instance) -> list[str]:
    """What the instance's sshd accepts: the keys the user chose at create, then the platform's."""
    return [*instance.ssh_public_keys, platform_public_key(instance)]
