"""django-allauth adapters: Cardmix's accounts behind allauth's sign-up, verification, password reset, login, MFA
and SSO flows."""
import logging
from urllib.parse import quote

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.models import EmailAddress
from allauth.account.utils import user_email
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter, _build_apps_from_settings
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext_lazy

from core.errors import ServiceError
from core.i18n import in_language_of

from . import services
from .middleware import SESSION_ORG_KEY
from .models import normalize_email
from .sso import sso_user_create

logger = logging.getLogger("cardmix.tenancy")


def _site_url(path: str) -> str:
    # Emailed links point at SITE_URL, never at the request's Host header (which a client chooses).
    return settings.SITE_URL.rstrip("/") + path


def email_address_of(user) -> EmailAddress:
    """allauth's row for the account's one address (accounts made outside allauth's sign-up have none yet)."""
    address, _ = EmailAddress.objects.get_or_create(user=user, email=user.email, defaults={"primary": True})
    return address


class AccountAdapter(DefaultAccountAdapter):
    """allauth's sign-up creates the account through tenancy.services.user_signup (personal organization, owner
    membership, the page's language, audit); confirming the address grants the trial (user_mark_verified)."""

    error_messages = {**DefaultAccountAdapter.error_messages,
                      "email_taken": gettext_lazy("An account with this email address already exists.")}

    def clean_email(self, email: str) -> str:
        """The one spelling of an address (NFKC, IDNA), so a look-alike of a taken address is taken too."""
        return normalize_email(email)

    def save_user(self, request, user, form, commit=True):
        """The sign-up form's account, made by the service (which checks refused domains and races too: the view
        shows its ServiceError on the form). `user`, allauth's blank draft, is not used."""
        data = form.cleaned_data
        user = services.user_signup(email=data["email"], password=data["password1"], name=data.get("name", ""),
                                    request=request)
        # No authenticate() ran: name the backend the session records (as the console's own sign-up did).
        user.backend = "django.contrib.auth.backends.ModelBackend"
        return user

    def get_signup_redirect_url(self, request) -> str:
        """A password sign-up goes to "check your email"; an SSO one (the IdP vouched for the address) does not."""
        if request.user.email_verified_at is None:
            return reverse("console:check_email")
        return super().get_signup_redirect_url(request)

    def confirm_email(self, request, email_address) -> bool:
        """The emailed link: allauth marks its address row verified; if it is the account's address, Cardmix's
        verification follows (email_verified_at, and the trial the first time this mailbox is ever verified)."""
        with transaction.atomic():
            confirmed = super().confirm_email(request, email_address)
            user = email_address.user
            if confirmed and normalize_email(email_address.email) == user.email:
                services.user_mark_verified(user=user, request=request)
        return confirmed

    def set_password(self, user, password) -> None:
        """A reset link's new password (the console has no other allauth password page), saved and audited."""
        services.password_reset_complete(user=user, password=password, request=self.request)

    def send_password_reset_mail(self, user, email, context) -> None:
        """Only to an account with a password, as before allauth: an SSO account signs in through its IdP."""
        if user.has_usable_password():
            super().send_password_reset_mail(user, email, context)

    def send_mail(self, template_prefix, email, context) -> None:
        """In the recipient's language (User.language, else the request's)."""
        with in_language_of(context.get("user")):
            super().send_mail(template_prefix, email, context)

    def get_email_confirmation_url(self, request, emailconfirmation) -> str:
        return _site_url(reverse("account_confirm_email", args=[emailconfirmation.key]))

    def get_reset_password_from_key_url(self, key: str) -> str:
        # allauth's own trick: the URL takes uidb36 and key apart, `key` here is "uidb36-key".
        path = reverse("account_reset_password_from_key", kwargs={"uidb36": "UID", "key": "KEY"})
        return _site_url(path.replace("UID-KEY", quote(key)))


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def list_apps(self, request, provider=None, client_id=None):
        """The admin's Social applications and the settings' (OIDC_PROVIDERS); with the database unreachable,
        the settings' alone, so the login page still renders (and says so in the log)."""
        try:
            return super().list_apps(request, provider=provider, client_id=client_id)
        except (OperationalError, InterfaceError):
            logger.warning("SSO providers from the database unavailable; listing the configured ones only")
            return [app for apps in _build_apps_from_settings(provider=provider, client_id=client_id).values()
                    for app in apps]

    def populate_user(self, request, sociallogin, data):
        """The IdP's `name` claim (or given + family name) is the account's name."""
        user = super().populate_user(request, sociallogin, data)
        name = data.get("name") or " ".join(filter(None, (data.get("first_name"), data.get("last_name"))))
        user.name = str(name or "").strip()[:150]
        return user

    def save_user(self, request, sociallogin, form=None):
        """A first SSO sign-in: Cardmix's account (tenancy.sso.sso_user_create), then allauth's own rows (the
        social account, the verified email address). The session starts in the bound organization, if any."""
        draft = sociallogin.user
        try:
            user, joined = sso_user_create(email=user_email(draft) or "", name=draft.name,
                                           provider_id=sociallogin.account.provider, request=request)
        except ServiceError as exc:  # a refused email domain, a taken address, no email at all
            raise ImmediateHttpResponse(render(request, "socialaccount/refused.html",
                                               {"error": exc, "details": exc.details}, status=400)) from None
        for address in sociallogin.email_addresses:  # the IdP vouched for the address the account has
            if address.email.lower() == user.email:
                address.verified = True
        sociallogin.user = user
        sociallogin.save(request)
        if joined:
            request.session[SESSION_ORG_KEY] = str(joined[0].organization_id)
        return user
