"""Resolves the console session's current organization onto request.org / request.membership."""
from django.shortcuts import redirect
from django.utils import translation

from core.logging import log_context_set

from .mfa import user_has_mfa
from .selectors import membership_for_session

SESSION_ORG_KEY = "current_org_id"


class CurrentOrganizationMiddleware:
    """The API's token authentication overrides request.org with the token's organization."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.org = None
        request.membership = None
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            membership = membership_for_session(user=user, org_id=request.session.get(SESSION_ORG_KEY))
            if membership is not None:
                request.membership = membership
                request.org = membership.organization
                log_context_set(org_id=membership.organization_id)  # observability: org id on log lines
        return self.get_response(request)


class UserLanguageMiddleware:
    """i18n: a logged-in user's own language (User.language) wins over the cookie and Accept-Language that
    LocaleMiddleware read; a blank setting leaves theirs. After AuthenticationMiddleware, before the views."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        code = getattr(user, "language", "") if user is not None and user.is_authenticated else ""
        if code and translation.check_for_language(code):
            translation.activate(code)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)


# Paths a member of an organization that requires MFA may reach before enrolling: the enrolment itself
# (allauth under /accounts/, with the email confirmation allauth wants before a second factor, and the page that
# sends its link again), logging out, static files, and the API (session calls are refused there by
# tenancy.authentication; tokens are token-only).
MFA_EXEMPT_PREFIXES = ("/accounts/", "/logout/", "/static/", "/api/", "/admin/", "/healthz", "/metrics", "/jsi18n/", "/language/",
                       "/account/organizations/", "/signup/check-email/")


class MfaRequiredMiddleware:
    """Sends a member of an organization that requires MFA and who has no second factor to enrolment."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if mfa_enrolment_needed(request) and not request.path.startswith(MFA_EXEMPT_PREFIXES):
            return redirect("mfa_index")
        return self.get_response(request)


def mfa_enrolment_needed(request) -> bool:
    """Whether the console session's organization requires MFA that this user has not set up (one query, only
    for such organizations)."""
    org = getattr(request, "org", None)
    if org is None or not org.mfa_required:
        return False
    cached = getattr(request, "_mfa_enrolled", None)
    if cached is None:
        cached = request._mfa_enrolled = user_has_mfa(user=request.user)
    return not cached
