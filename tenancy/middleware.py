"""Resolves the console session's current organization onto request.org / request.membership."""
from django.utils import translation

from core.logging import log_context_set

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
