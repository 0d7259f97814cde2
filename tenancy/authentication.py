"""DRF authentication: bearer API tokens and the console session with CSRF."""
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import AuthenticationFailed

from core.authentication import bearer_secret
from core.errors import PermissionDeniedError
from core.logging import log_context_set

from .credentials import token_touch
from .middleware import mfa_enrolment_needed
from .selectors import token_authenticate
from .token_secrets import TOKEN_PREFIX, token_hash

INVALID = gettext_lazy("The API token is invalid, expired or revoked.")


class BearerTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer cmx_…` → (user, token) and request.org / request.membership from the token.

    Membership is checked on every request: a token of a user who left the organization stops working.
    """

    keyword = "Bearer"

    def authenticate(self, request):
        secret = bearer_secret(request, keyword=self.keyword, invalid=INVALID)
        if secret is None:
            return None  # no bearer credential: the session (or nothing) decides
        if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
            raise AuthenticationFailed(INVALID)
        found = token_authenticate(token_hash=token_hash(secret))
        if found is None:
            raise AuthenticationFailed(INVALID)
        token, membership = found
        token_touch(token=token)
        # DRF's Request proxies attribute reads to the Django request; views and permissions read these.
        django_request = getattr(request, "_request", request)
        django_request.org = membership.organization
        django_request.membership = membership
        log_context_set(org_id=membership.organization_id)  # observability: org id on every log line
        # i18n: the token's user's own language wins over Accept-Language, as in the console (the middleware that
        # applies it ran before DRF knew who this is).
        code = token.user.language
        if code and translation.check_for_language(code):
            translation.activate(code)
            django_request.LANGUAGE_CODE = translation.get_language()
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword


class CsrfSessionAuthentication(SessionAuthentication):
    """The console session; request.org comes from CurrentOrganizationMiddleware.

    A session in an organization that requires MFA, of a user without a second factor, is refused
    (`mfa_required`), as the console sends it to enrolment. Bearer tokens are token-only: no MFA there.
    """

    def authenticate(self, request):
        found = super().authenticate(request)
        if found is not None and mfa_enrolment_needed(getattr(request, "_request", request)):
            raise PermissionDeniedError(_("Your organization requires two-factor authentication: set it up in "
                                          "the console first."), code="mfa_required")
        return found
