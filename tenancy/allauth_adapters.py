"""django-allauth adapters: Cardmix's accounts behind allauth's login, MFA and SSO flows."""
import logging

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.utils import user_email
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter, _build_apps_from_settings
from django.db import InterfaceError, OperationalError
from django.shortcuts import render

from core.errors import ServiceError

from .middleware import SESSION_ORG_KEY
from .sso import sso_user_create

logger = logging.getLogger("cardmix.tenancy")


class AccountAdapter(DefaultAccountAdapter):
    """Sign-up with a password stays Cardmix's own page (/signup/: personal organization, verification link,
    trial); allauth's sign-up is used only by SSO (SocialAccountAdapter.save_user)."""


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
