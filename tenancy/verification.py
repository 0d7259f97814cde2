"""Verification links mailed before allauth confirmed addresses (/verify-email/<token>/, valid three days): still
read, so such a link hands over to allauth's confirmation of the address it names. Remove three days after the
allauth sign-up shipped, when none can be valid any more."""
from django.core import signing

from .models import User

SALT = "tenancy.email-verification"
MAX_AGE_SECONDS = 3 * 24 * 3600


def legacy_link_user(token: str) -> User | None:
    """The account a pre-allauth link names, when the link is genuine, unexpired and still names its address."""
    try:
        data = signing.loads(token, salt=SALT, max_age=MAX_AGE_SECONDS)
    except signing.BadSignature:  # includes SignatureExpired
        return None
    user = User.objects.filter(pk=data.get("u")).first()
    return user if user is not None and user.email == data.get("e") else None
