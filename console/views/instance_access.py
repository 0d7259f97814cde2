"""The instance page's Access section: its HTTP ports (Open JupyterLab, the proxy links), the ports users add,
share links, and the web terminal. Writes go through provisioning/services/ports.py."""
import re
from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from core.errors import NotFoundError, ServiceError
from provisioning import selectors
from provisioning.choices import InstanceState
from provisioning.http_ports import port_path, port_url, share_url, subdomain_mode
from provisioning.services.ports import (
    instance_port_add,
    instance_port_remove,
    port_share_create,
    port_share_revoke,
)
from tenancy.permissions import request_can

from .. import port_grants, proxy_access
from .access import or_404, require_capability, require_write

# Where `?next=` may lead inside a port: a relative path, nothing that a browser reads as another host.
NEXT_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%/?-]{0,500}")


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
    if subdomain_mode():  # each port on its own host: opened through the console's hand-off
        for p in ports:
            p["open"] = reverse("console:instance_port_open", kwargs={"instance_id": instance.pk, "port": p["port"]})
    jupyter = next((p for p in ports if p["jupyter"]), None)
    return {"access": {
        "running": running,
        "ports": ports,
        "jupyter_url": _open_url(jupyter, "lab") if jupyter and running else "",
        "shares": list(selectors.port_shares(instance=instance)[:20]),
        "terminal_ws": f"/ws/instances/{instance.pk}/terminal/" if running else "",
        "port_form": PortAddForm(),
        "share_form": PortShareForm(),
    }}


def _open_url(port: dict, next_path: str) -> str:
    if "open" in port:
        return f"{port['open']}?{urlencode({'next': next_path})}"
    return f"{port['path']}{next_path}"


@login_required
def instance_port_open_view(request, instance_id, port):
    """Open one of the instance's ports in this browser. Path mode: its path. Subdomain mode: a one-minute,
    single-use ticket to the port's own host, which signs the browser in there (port_grants.py) — the
    platform's session cookie never goes to that host. 404 for whoever the proxy would refuse."""
    try:
        proxy_access.port_target(user=request.user, session=request.session, instance_id=instance_id, port=port)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
    next_path = request.GET.get("next", "")
    next_path = next_path.lstrip("/") if NEXT_PATH.fullmatch(next_path) else ""
    if not subdomain_mode():
        return redirect(port_path(instance_id, port) + next_path)
    if not request.session.session_key:
        request.session.save()
    ticket = port_grants.ticket_issue(user=request.user, session_key=request.session.session_key,
                                      org_id=request.org.pk, instance_id=instance_id, port=port, next_path=next_path)
    return redirect(f"{port_url(instance_id, port).rstrip('/')}{port_grants.AUTH_PATH}?"
                    + urlencode({"ticket": ticket}))


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
    """Declare a port (reachable at once: a running container's through its sshd, console/port_tunnels.py)."""
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
