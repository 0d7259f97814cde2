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


# --- security issue: document the SPEC §5 error envelope on every operation ---------------------
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["code", "message", "details"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                       "details": {"type": "object", "additionalProperties": True}},
    }},
}
_COMMON_ERRORS = {"400": "validation_error", "401": "not_authenticated, token_invalid", "403": "permission_denied, verification_required",
                  "404": "not_found", "405": "method_not_allowed", "429": "throttled",
                  "503": "service_unavailable"}
_WRITE_ERRORS = {"402": "insufficient_funds",
                 "409": "insufficient_capacity, invalid_state, quota_exceeded, idempotency_in_progress",
                 "415": "validation_error (a body in a media type other than JSON, form or multipart)",
                 "422": "idempotency_key_reused"}


def error_responses_hook(result, generator, request, public):
    """drf-spectacular postprocessing hook: every operation documents its error answers (the envelope)."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for item in result.get("paths", {}).values():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            errors = dict(_COMMON_ERRORS, **(_WRITE_ERRORS if method in ("post", "put", "patch", "delete") else {}))
            for status, codes in errors.items():
                operation["responses"].setdefault(status, {"description": f"Error: {codes}", "content": ref})
    return result


def schema_generation(view) -> bool:
    """True while drf-spectacular builds the schema (no request.org then): views return `.none()`."""
    return getattr(view, "swagger_fake_view", False)
