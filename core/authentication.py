"""Parsing of `Authorization: Bearer <secret>`, shared by the API-token and node-token schemes."""
from rest_framework.authentication import get_authorization_header
from rest_framework.exceptions import AuthenticationFailed


def bearer_secret(request, *, keyword: str = "Bearer", invalid: str) -> str | None:
    """The secret after `Bearer`, None when there is no bearer credential; malformed → 401 `invalid`."""
    header = get_authorization_header(request).split()
    if not header or header[0].lower() != keyword.lower().encode():
        return None
    if len(header) != 2:
        raise AuthenticationFailed(invalid)
    try:
        return header[1].decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed(invalid) from None
