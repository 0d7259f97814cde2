"""The instance page's Access section: its HTTP ports (Open JupyterLab, the proxy links), the ports users add,
share links, and the web terminal. Writes go through provisioning/services/ports.py."""
from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from provisioning import selectors
from provisioning.choices import InstanceState
from provisioning.http_ports import share_url
from provisioning.services.ports import (
    instance_port_add,
    instance_port_remove,
    port_share_create,
    port_share_revoke,
)
from tenancy.permissions import request_can

from .access import or_404, require_capability, require_write


class PortAddForm(forms.Form):
    port = forms.IntegerField(min_value=1, max_value=65535)
    name = forms.CharField(max_length=40, required=False)


class PortShareForm(forms.Form):
    expires_in_hours = forms.IntegerField(min_value=1, max_value=24 * 30, initial=24)


def access_context(request, instance) -> dict:
    """What the Access section shows; empty for a role that may not use the instance (a viewer sees none)."""
    if not request_can(request, "instances") or instance.state in (InstanceState.TERMINATED,):
        return {}
    running = instance.state == InstanceState.RUNNING
    ports = selectors.instance_ports(instance=instance)
    jupyter = next((p for p in ports if p["jupyter"]), None)
    return {"access": {
        "running": running,
        "ports": ports,
        "jupyter_url": f"{jupyter['path']}lab" if jupyter and running else "",
        "shares": list(selectors.port_shares(instance=instance)[:20]),
        "terminal_ws": f"/ws/instances/{instance.pk}/terminal/" if running else "",
        "port_form": PortAddForm(),
        "share_form": PortShareForm(),
    }}


def _back(instance_id):
    return redirect(reverse("console:instance_detail", kwargs={"instance_id": instance_id}) + "#access")


def _instance_for_write(request, instance_id):
    require_capability(request, "read")
    or_404(selectors.instance_get, org=request.org, instance_id=instance_id)  # 404 before anything else
    require_write(request, "instances")


def _refused(request, exc: ServiceError):
    messages.error(request, exc.message)


@login_required
@require_POST
def instance_port_add_view(request, instance_id):
    """Declare a port (a container publishes it from its next start)."""
    _instance_for_write(request, instance_id)
    form = PortAddForm(request.POST)
    if not form.is_valid():
        messages.error(request, gettext("Port: a number from 1 to 65535, and a name of at most 40 characters."))
        return _back(instance_id)
    try:
        instance_port_add(org=request.org, instance_id=instance_id, port=form.cleaned_data["port"],
                          name=form.cleaned_data["name"], actor=request.user, request=request)
    except ServiceError as exc:
        _refused(request, exc)
    return _back(instance_id)


@login_required
@require_POST
def instance_port_remove_view(request, instance_id, port):
    _instance_for_write(request, instance_id)
    try:
        instance_port_remove(org=request.org, instance_id=instance_id, port=port, actor=request.user, request=request)
    except ServiceError as exc:
        _refused(request, exc)
    return _back(instance_id)


@login_required
@require_POST
def instance_port_share_view(request, instance_id, port):
    """A share link of one port: shown once, on this page."""
    _instance_for_write(request, instance_id)
    form = PortShareForm(request.POST)
    if not form.is_valid():
        messages.error(request, gettext("Expiry: from 1 hour to 30 days."))
        return _back(instance_id)
    try:
        share, secret = port_share_create(org=request.org, instance_id=instance_id, port=port, actor=request.user,
                                          expires_in=timedelta(hours=form.cleaned_data["expires_in_hours"]),
                                          request=request)
    except ServiceError as exc:
        _refused(request, exc)
        return _back(instance_id)
    link = request.build_absolute_uri(share_url(instance_id, port, secret))
    return render(request, "console/instances/share_created.html",
                  {"share": share, "link": link, "instance_id": instance_id})


@login_required
@require_POST
def instance_share_revoke_view(request, instance_id, share_id):
    _instance_for_write(request, instance_id)
    try:
        port_share_revoke(org=request.org, instance_id=instance_id, share_id=share_id, actor=request.user,
                          request=request)
    except ServiceError as exc:
        _refused(request, exc)
    return _back(instance_id)
