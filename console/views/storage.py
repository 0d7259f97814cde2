"""Storage in the console: the organization's volumes (size, usage, zone, attached instances, monthly cost) with
create, grow and delete (each asks first, naming what is lost), the dataset library, the pickers of the
new-instance page and the mounts of the instance page. Writes through storage's services, reads through its
tenant-scoped selectors (another organization's volume → 404)."""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.errors import ServiceError
from core.money import format_fen
from inventory.selectors import zone_list
from provisioning.selectors import instance_names
from storage import selectors, services
from storage.choices import VolumeKind
from storage.retention import deletion_due
from tenancy.permissions import request_can

from ..service_text import for_people
from .access import or_404, require_capability, require_write
from .confirm import confirm_page

HOURS_PER_MONTH = 720  # the console's "per month": 30 days, as the monthly packages count them


class VolumeCreateForm(forms.Form):
    name = forms.RegexField(regex=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", max_length=63,
                            help_text=gettext_lazy("Lowercase letters, digits and dashes; a shared volume mounts at /mnt/<name>."))
    kind = forms.ChoiceField(choices=VolumeKind.choices, widget=forms.RadioSelect, initial=VolumeKind.DISK)
    size_gib = forms.IntegerField(min_value=1, label=gettext_lazy("Size (GiB)"), initial=100)
    zone = forms.ChoiceField()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["zone"].choices = [(z.slug, z.name) for z in zone_list()]


class VolumeGrowForm(forms.Form):
    size_gib = forms.IntegerField(min_value=1, label=gettext_lazy("New size (GiB)"))


def monthly_text(volume) -> str:
    return format_fen(volume.size_gib * volume.rate * HOURS_PER_MONTH)


def _decorate(org, volumes) -> list:
    """Each volume with its usage share, monthly cost and attached instances' names (one query for the names)."""
    volumes = list(volumes)
    names = instance_names(org=org, ids=[a.instance_id for v in volumes for a in v.live_attachments])
    for v in volumes:
        v.usage_max = max(float(v.usage_gib), float(v.size_gib))
        v.monthly = monthly_text(v)
        v.attached = [(str(a.instance_id), names.get(str(a.instance_id), str(a.instance_id)[:8]), a.mount_path)
                      for a in v.live_attachments]
        v.deletion_at = deletion_due(v)
    return volumes


@login_required
@require_http_methods(["GET", "POST"])
def storage(request):
    """The volumes and the library; POST creates a volume."""
    require_capability(request, "read")
    can_write = request_can(request, "instances")
    form = VolumeCreateForm(request.POST or None)
    if request.method == "POST":
        require_write(request, "instances")
        if form.is_valid():
            data = form.cleaned_data
            try:
                zone = next(z for z in zone_list() if z.slug == data["zone"])
                volume = services.volume_create(org=request.org, zone=zone, name=data["name"], kind=data["kind"],
                                                size_gib=data["size_gib"], actor=request.user, request=request)
            except ServiceError as exc:
                form.add_error(None, for_people(exc))
            else:
                messages.success(request, gettext('Created %(name)s (%(size_gib)s GiB, %(monthly_text)s per month).') % {'name': volume.name, 'size_gib': volume.size_gib, 'monthly_text': monthly_text(volume)})
                return redirect("console:storage")
    return render(request, "console/storage/list.html", {
        "volumes": _decorate(request.org, selectors.volume_list(org=request.org)), "form": form,
        "datasets": list(selectors.dataset_list()), "can_write": can_write, "grow_form": VolumeGrowForm()})


@login_required
@require_POST
def volume_grow(request, volume_id):
    require_capability(request, "read")
    volume = or_404(selectors.volume_get, org=request.org, volume_id=volume_id)
    require_write(request, "instances")
    form = VolumeGrowForm(request.POST)
    if not form.is_valid():
        messages.error(request, gettext("Give the new size in whole GiB."))
        return redirect("console:storage")
    try:
        volume = services.volume_grow(org=request.org, volume_id=volume.pk, size_gib=form.cleaned_data["size_gib"],
                                      actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, for_people(exc))
    else:
        messages.success(request, gettext('%(name)s grown to %(size_gib)s GiB with nothing detached (%(monthly_text)s per month).') % {'name': volume.name, 'size_gib': volume.size_gib, 'monthly_text': monthly_text(volume)})
    return redirect("console:storage")


@login_required
@require_http_methods(["GET", "POST"])
def volume_delete(request, volume_id):
    """POST deletes; GET is the confirmation page (without JavaScript) naming what is lost."""
    require_capability(request, "read")
    volume = or_404(selectors.volume_get, org=request.org, volume_id=volume_id)
    require_write(request, "instances")
    if request.method == "GET":
        return confirm_page(request, title=gettext('Delete the volume %(name)s?') % {'name': volume.name}, label=gettext("Delete for good"),
                            cancel=reverse("console:storage"), detail=delete_warning(volume))
    try:
        services.volume_delete(org=request.org, volume_id=volume.pk, actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, for_people(exc))
    else:
        messages.success(request, gettext('Deleted %(name)s; its billing has stopped.') % {'name': volume.name})
    url = reverse("console:storage")
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def delete_warning(volume) -> str:
    return (gettext('Everything on %(name)s (%(size_gib)s GiB, %(usage_gib)s GiB used) is erased for good and cannot be recovered; its S3 access keys stop working. Detach it from every instance first.') % {'name': volume.name, 'size_gib': volume.size_gib, 'usage_gib': volume.usage_gib})


# --- the new-instance page and the instance page ----------------------------------------------------

def storage_pickers(org) -> dict:
    """The new-instance form's choices: the organization's volumes and the library (each labelled for people)."""
    if org is None:
        return {}
    volumes = list(selectors.volume_list(org=org))
    for v in volumes:
        where = "/data" if v.kind == VolumeKind.DISK else f"/mnt/{v.name}"
        busy = " · attached" if v.kind == VolumeKind.DISK and v.live_attachments else ""
        v.picker_label = (f"{v.name} · {v.get_kind_display()} · {v.size_gib} GiB · {v.zone.name} · at {where} · "
                          f"{monthly_text(v)}/month{busy}")
    datasets = list(selectors.dataset_list())
    for d in datasets:
        zones = ", ".join(z.name for z in d.zones.all()) or "no zone yet"
        d.picker_label = f"{d.name} · {d.get_kind_display()} · {d.size_gib} GiB · {zones} · read-only, free"
    return {"volumes": volumes, "datasets": datasets}


def instance_mounts(instance_id) -> dict:
    """The instance page's mounts: its volumes (with their monthly cost) and datasets."""
    attachments = selectors.volumes_for_instance(instance_id=instance_id)
    mounts = [{"path": a.mount_path, "name": a.volume.name, "kind": a.volume.get_kind_display(),
               "size_gib": a.volume.size_gib, "monthly": monthly_text(a.volume), "read_only": False}
              for a in attachments]
    mounts += [{"path": m.dataset.mount_path, "name": m.dataset.name, "kind": m.dataset.get_kind_display(),
                "size_gib": m.dataset.size_gib, "monthly": "", "read_only": True}
               for m in selectors.datasets_for_instance(instance_id=instance_id)]
    total = sum(a.volume.size_gib * a.volume.rate for a in attachments) * HOURS_PER_MONTH
    return {"mounts": mounts, "storage_monthly": format_fen(total) if attachments else ""}
