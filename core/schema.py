"""OpenAPI descriptions of the two authentication schemes (drf-spectacular extensions)."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenancy.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "cmx_…",
                "description": "An API token (`Authorization: Bearer cmx_…`)."}


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "tenancy.authentication.CsrfSessionAuthentication"
    name = "consoleSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid",
                "description": "The console session (unsafe methods need the X-CSRFToken header)."}
