"""DRF authentication: bearer API tokens (tenancy issue) and the console session with CSRF."""
from rest_framework.authentication import BaseAuthentication, SessionAuthentication


class BearerTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer cmx_…` → (user, token) and request.org = the token's organization.

    Filled in by the tenancy issue; until then it declines every request.
    """

    keyword = "Bearer"

    def authenticate(self, request):
        return None

    def authenticate_header(self, request):
        return self.keyword


class CsrfSessionAuthentication(SessionAuthentication):
    """The console session; request.org comes from CurrentOrganizationMiddleware."""
