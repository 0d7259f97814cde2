"""Webhooks page: endpoints (secret shown once), their deliveries with each attempt, resend, rotate, delete."""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from webhooks import selectors, services
from webhooks.events import EVENT_TYPES

from ..forms import form_errors_add
from .access import or_404, require_capability
from .confirm import confirm_page


class EndpointForm(forms.Form):
    url = forms.CharField(max_length=500, label=gettext_lazy("URL"))
    event_types = forms.MultipleChoiceField(choices=[(t, t) for t in EVENT_TYPES],
                                            widget=forms.CheckboxSelectMultiple, label=gettext_lazy("Events"))
    description = forms.CharField(max_length=200, required=False)


@login_required
def webhooks(request):
    require_capability(request, "webhooks")
    form = EndpointForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            _, secret = services.endpoint_create(org=request.org, actor=request.user, request=request,
                                                 **form.cleaned_data)
        except ServiceError as exc:
            form_errors_add(form, exc)
        else:
            form = EndpointForm()
    response = render(request, "console/webhooks/list.html", {
        "endpoints": selectors.endpoint_list(org=request.org), "form": form, "secret": secret,
        "event_types": EVENT_TYPES})
    if secret:
        response["Cache-Control"] = "no-store"
    return response


@login_required
def webhook_detail(request, id):
    require_capability(request, "webhooks")
    endpoint = or_404(selectors.endpoint_get, org=request.org, id=id)
    deliveries = selectors.delivery_list(endpoint=endpoint)[:50]
    return render(request, "console/webhooks/detail.html", {"endpoint": endpoint, "deliveries": deliveries,
                                                            "secret": request.session.pop("webhook_secret", None)})


@login_required
@require_POST
def webhook_toggle(request, id):
    require_capability(request, "webhooks")
    endpoint = or_404(selectors.endpoint_get, org=request.org, id=id)
    services.endpoint_update(endpoint=endpoint, enabled=not endpoint.enabled, actor=request.user, request=request)
    messages.success(request, gettext('%(enabled_is_False_else__Enabled)s %(url)s.') % {'enabled_is_False_else__Enabled': 'Disabled' if endpoint.enabled is False else 'Enabled', 'url': endpoint.url})
    return redirect("console:webhook_detail", id=endpoint.pk)


@login_required
@require_http_methods(["GET", "POST"])
def webhook_rotate(request, id):
    require_capability(request, "webhooks")
    endpoint = or_404(selectors.endpoint_get, org=request.org, id=id)
    if request.method == "GET":
        return confirm_page(request, title=gettext('Rotate the signing secret of %(url)s?') % {'url': endpoint.url}, label=gettext("Rotate"),
                            cancel=reverse("console:webhook_detail", args=[endpoint.pk]),
                            detail=gettext("A new secret is shown once. The old one keeps signing for the overlap window, "
                                   "so update your receiver before it ends."))
    request.session["webhook_secret"] = services.secret_rotate(endpoint=endpoint, actor=request.user,
                                                               request=request)
    return redirect("console:webhook_detail", id=endpoint.pk)


@login_required
@require_http_methods(["GET", "POST"])
def webhook_delete(request, id):
    require_capability(request, "webhooks")
    endpoint = or_404(selectors.endpoint_get, org=request.org, id=id)
    if request.method == "GET":
        return confirm_page(request, title=gettext('Delete the webhook endpoint %(url)s?') % {'url': endpoint.url}, label=gettext("Delete"),
                            cancel=reverse("console:webhook_detail", args=[endpoint.pk]),
                            detail=gettext("Events stop going there at once; pending deliveries are dropped."))
    services.endpoint_delete(endpoint=endpoint, actor=request.user, request=request)
    messages.success(request, gettext('Deleted %(url)s.') % {'url': endpoint.url})
    return redirect("console:webhooks")


@login_required
@require_POST
def webhook_resend(request, id, delivery_id):
    require_capability(request, "webhooks")
    endpoint = or_404(selectors.endpoint_get, org=request.org, id=id)
    delivery = or_404(selectors.delivery_get, endpoint=endpoint, id=delivery_id)
    try:
        services.delivery_resend(delivery=delivery, actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, gettext('Resending %(type)s (%(event_id)s).') % {'type': delivery.event.type, 'event_id': delivery.event_id})
    return redirect("console:webhook_detail", id=endpoint.pk)
