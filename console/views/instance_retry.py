"""Retry a failed instance from its page: a new instance with the same request (provisioning/services/retry.py),
labelled "(retry)"; the failed one stays until terminated."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from provisioning import selectors
from provisioning.services.retry import instance_retry

from ..service_text import for_people
from .access import or_404, require_capability, require_write


@login_required
@require_POST
def instance_retry_view(request, instance_id):
    """POST: create the retry (or find the one already made) and go to it; a refusal shows on the failed page."""
    require_capability(request, "read")
    or_404(selectors.instance_get, org=request.org, instance_id=instance_id)  # another tenant's id → 404
    require_write(request, "instances")
    target = reverse("console:instance_detail", kwargs={"instance_id": instance_id})
    try:
        new = instance_retry(org=request.org, instance_id=instance_id, actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, gettext("Retry refused: ") + for_people(exc.message))
    else:
        messages.success(request, gettext('Retrying as a new instance, %(name)s.') % {'name': new.name})
        target = reverse("console:instance_detail", kwargs={"instance_id": new.pk})
    if request.htmx:  # leave the failed page for the new one (or reload it with the refusal)
        response = HttpResponse(status=204)
        response["HX-Redirect"] = target
        return response
    return redirect(target)
