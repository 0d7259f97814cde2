"""Who may see which console page: the SPEC §5 capabilities, answered with 404 like the API's tenant checks."""
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils.translation import gettext

from core.errors import NotFoundError
from tenancy.permissions import request_can


def require_capability(request, capability: str) -> None:
    """404 without a current organization or when the role cannot read this area at all."""
    if getattr(request, "org", None) is None or not request_can(request, capability):
        raise Http404(gettext("Nothing to show in this organization."))


def require_write(request, capability: str) -> None:
    """403 for a role that may read the page but not change anything on it."""
    if not request_can(request, capability):
        raise PermissionDenied(gettext("Your role does not allow this."))


def or_404(fn, /, **kwargs):
    """Call a tenant-scoped selector; its NotFoundError (other tenant, bad id) becomes the console's 404."""
    try:
        return fn(**kwargs)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
