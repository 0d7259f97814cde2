"""Email verification links: a signed, timestamped token naming the user and the address it was sent to."""
from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.urls import reverse
from django.utils.translation import gettext

from core.i18n import in_language_of

SALT = "tenancy.email-verification"
MAX_AGE_SECONDS = 3 * 24 * 3600


def verification_token_make(user) -> str:
    """A token valid for three days and only while the user's email is unchanged."""
    return signing.dumps({"u": str(user.pk), "e": user.email}, salt=SALT, compress=True)


def verification_token_read(token: str) -> dict | None:
    """{"u": user id, "e": email} or None when forged, tampered with or expired."""
    try:
        return signing.loads(token, salt=SALT, max_age=MAX_AGE_SECONDS)
    except signing.BadSignature:  # includes SignatureExpired
        return None


def verification_url(user) -> str:
    return settings.SITE_URL.rstrip("/") + reverse("console:verify_email", args=[verification_token_make(user)])


def verification_email_send(user) -> None:
    """Send the link (the console email backend prints it in development), in the user's language."""
    with in_language_of(user):
        greeting = gettext("Hello %(name)s,") % {"name": user.name} if user.name else gettext("Hello,")
        body = gettext("Confirm your email address to activate your trial credit:\n\n%(url)s\n\n"
                       "The link is valid for three days. If you did not sign up for Cardmix, ignore this email.\n")
        send_mail(
            subject=gettext("Verify your Cardmix email address"),
            message=greeting + "\n\n" + body % {"url": verification_url(user)},
            from_email=None,
            recipient_list=[user.email],
        )
