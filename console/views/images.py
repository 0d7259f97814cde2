"""The organization's private images in the console: list (reference, digest, size, login set or not), register by
reference with an optional pull login (write-only: never shown again), delete; and the instance page's *Save as
image*. Writes through inventory's and provisioning's services, reads through tenant-scoped selectors."""
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.errors import ServiceError
from inventory import custom_images as services
from inventory.choices import CustomImageOrigin, Vendor
from inventory.selectors import custom_image_get, custom_image_list
from provisioning import selectors as instance_selectors
from provisioning.choices import InstanceKind, InstanceState
from provisioning.services.images import instance_image_save
from storage.saved_images import saved_image_gib
from tenancy.permissions import request_can

from ..forms import VENDOR_LABELS
from ..service_text import for_people
from .access import or_404, require_capability, require_write
from .confirm import confirm_page


class CustomImageForm(forms.Form):
    name = forms.RegexField(regex=r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$", max_length=64,
                            help_text=gettext_lazy("Lowercase letters, digits, dots, dashes and underscores."))
    reference = forms.CharField(max_length=255, label=gettext_lazy("Image reference"),
                                help_text=gettext_lazy("registry.example.com/team/trainer:1.0"))
    vendors = forms.MultipleChoiceField(choices=[(v, VENDOR_LABELS.get(v, v)) for v in Vendor.values],
                                        initial=[Vendor.NVIDIA], widget=forms.CheckboxSelectMultiple,
                                        label=gettext_lazy("Runs on"))
    username = forms.CharField(max_length=200, required=False, label=gettext_lazy("Registry username"))
    password = forms.CharField(max_length=4096, required=False, strip=False,
                               widget=forms.PasswordInput(render_value=False),
                               label=gettext_lazy("Password or access token"))


class SaveImageForm(forms.Form):
    name = forms.RegexField(regex=r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$", max_length=64,
                            label=gettext_lazy("Image name"))
    tag = forms.RegexField(regex=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", max_length=128, required=False,
                           initial="latest", label=gettext_lazy("Tag"))


def _field_errors(form, exc: ServiceError) -> None:
    """A service's 400 onto the field it names (reference, credentials → the login fields), else the form."""
    details = getattr(exc, "details", None) or {}
    placed = False
    for field, messages_ in details.items():
        target = {"credentials": "password"}.get(field, field)
        if target in form.fields:
            for message in messages_:
                form.add_error(target, message)
            placed = True
    if not placed:
        form.add_error(None, for_people(exc))


@login_required
@require_http_methods(["GET", "POST"])
def images(request):
    """The organization's private images; POST registers one (its registry is asked first)."""
    require_capability(request, "read")
    form = CustomImageForm(request.POST or None)
    if request.method == "POST":
        require_write(request, "instances")
        if form.is_valid():
            data = form.cleaned_data
            try:
                image = services.custom_image_register(
                    org=request.org, name=data["name"], reference=data["reference"], vendors=data["vendors"],
                    username=data["username"], password=data["password"], actor=request.user, request=request)
            except ServiceError as exc:
                _field_errors(form, exc)
            else:
                messages.success(request, _("Registered %(name)s (%(digest)s).") % {"name": image.name,
                                                                                    "digest": image.digest[:19]})
                return redirect("console:images")
    rows = list(custom_image_list(org=request.org))
    for row in rows:
        row.billed_gib = saved_image_gib(row.size_bytes) if row.origin == CustomImageOrigin.SAVED else None
    return render(request, "console/images/list.html", {
        "images": rows, "form": form, "can_write": request_can(request, "instances"),
        "save_registry": settings.IMAGE_SAVE_REGISTRY})


@login_required
@require_http_methods(["GET", "POST"])
def custom_image_delete(request, image_id):
    """POST deletes; GET is the confirmation page (without JavaScript)."""
    require_capability(request, "read")
    image = or_404(custom_image_get, org=request.org, image_id=image_id)
    require_write(request, "instances")
    if request.method == "GET":
        return confirm_page(request, title=_("Delete the image %(name)s?") % {"name": image.name},
                            label=_("Delete"), cancel=reverse("console:images"), detail=delete_warning(image))
    try:
        services.custom_image_delete(org=request.org, image_id=image.pk, actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, for_people(exc))
    else:
        messages.success(request, _("Deleted %(name)s.") % {"name": image.name})
    url = reverse("console:images")
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def delete_warning(image) -> str:
    if image.origin == CustomImageOrigin.SAVED:
        return _("New instances can no longer use it and its storage billing stops; running instances keep their "
                 "containers.")
    return _("New instances can no longer use it and its pull login is forgotten; running instances keep their "
             "containers. The image stays in your registry.")


@login_required
@require_POST
def instance_save_image(request, instance_id):
    """The instance page's *Save as image*: commit and push its container; the image appears on the images page."""
    require_capability(request, "read")
    instance = or_404(instance_selectors.instance_get, org=request.org, instance_id=instance_id)
    require_write(request, "instances")
    detail = reverse("console:instance_detail", kwargs={"instance_id": instance.pk})
    form = SaveImageForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Name the image with lowercase letters, digits, dots, dashes and underscores."))
        return redirect(detail)
    try:
        image = instance_image_save(org=request.org, instance_id=instance.pk, name=form.cleaned_data["name"],
                                    tag=form.cleaned_data["tag"] or "latest", actor=request.user, request=request)
    except ServiceError as exc:
        messages.error(request, for_people(exc))
        return redirect(detail)
    messages.success(request, _("Saving %(name)s as %(reference)s; it is ready to use once its size shows here.")
                     % {"name": instance.name, "reference": image.reference})
    return redirect("console:images")


def save_image_context(request, instance) -> dict:
    """The instance page's section: shown for container instances to those who may write."""
    if instance.kind != InstanceKind.CONTAINER or not request_can(request, "instances"):
        return {}
    return {"save_image": {"form": SaveImageForm(), "running": instance.state == InstanceState.RUNNING,
                           "configured": bool(settings.IMAGE_SAVE_REGISTRY)}}
