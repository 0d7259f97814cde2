"""Console forms: the create-instance form turns what the user picked into provisioning's InstanceSpec.

The form only shapes input; quota, funds, capacity and image/vendor rules stay in provisioning's
services (their ServiceErrors are attached back onto this form by the view).
"""
import uuid

from django import forms
from django.utils.translation import gettext, gettext_lazy
from django.utils.translation import gettext_lazy as _

from inventory.selectors import (
    accelerators_orderable,
    current_prices,
    image_list,
    stock_by_accelerator,
    stock_by_zone,
    zone_list,
)
from provisioning.choices import BillingMode, InstanceKind, PackageRenewal
from provisioning.placement import Item, Policy
from provisioning.placement.validation import MAX_POLICY_CARDS
from provisioning.services.specs import InstanceSpec

from .service_text import for_people

VENDOR_LABELS = {"nvidia": "NVIDIA", "huawei": gettext_lazy("Huawei Ascend"), "moore_threads": gettext_lazy("Moore Threads"),
                 "iluvatar": gettext_lazy("Iluvatar CoreX")}
MODE_CHOICES = [("items", gettext_lazy("Pick cards")), ("policy", gettext_lazy("Let Cardmix choose (policy)"))]
KIND_CHOICES = [(InstanceKind.CONTAINER, gettext_lazy("Container — 1–8 cards on one node, starts fastest")),
                (InstanceKind.BARE_METAL, gettext_lazy("Bare metal — whole nodes, clusters on one fabric"))]
BILLING_CHOICES = [(BillingMode.ON_DEMAND, gettext_lazy("On demand — per second")),
                   (BillingMode.MONTHLY, gettext_lazy("Monthly package — 720 h at the monthly rate, paid up front"))]
RENEWAL_CHOICES = [(PackageRenewal.STOP, gettext_lazy("Stop the instance")), (PackageRenewal.RENEW, gettext_lazy("Renew the package")),
                   (PackageRenewal.ON_DEMAND, gettext_lazy("Continue on demand"))]


class CatalogChoices:
    """The orderable catalog with stock and prices, and the zones with their free cards, read once per request
    (six queries)."""

    def __init__(self):
        prices = current_prices()
        stock = stock_by_accelerator()
        self.accelerators = [a for a in accelerators_orderable()
                             if a.slug in prices]
        for acc in self.accelerators:
            acc.on_demand_ucny, acc.monthly_ucny = prices[acc.slug]
            acc.stock = stock[acc.slug]
        self.by_slug = {a.slug: a for a in self.accelerators}
        self.vendors = sorted({a.vendor for a in self.accelerators})
        images = list(image_list(active_only=True))
        self.images_by_vendor = {v: [i for i in images if v in (i.vendors or [])] for v in self.vendors}
        # Free cards per orderable accelerator in each zone: a sum over accelerators says nothing about the one
        # the customer wants (24 free could be 24 Ascend cards in a zone with no H100 left).
        free: dict[str, list[tuple[str, int]]] = {}
        for (zone, acc), row in sorted(stock_by_zone().items()):
            if acc in self.by_slug and row["total_cards"]:
                free.setdefault(zone, []).append((self.by_slug[acc].name, row["available_cards"]))
        self.zones = [(z, free.get(z.slug, [])) for z in zone_list()]

    def zone_choices(self):
        def stock(rows):
            return gettext("free: %(cards)s") % {"cards": ", ".join(f"{n} × {name}" for name, n in rows)} \
                if rows else gettext("no cards")

        return [("", gettext("Any zone (Cardmix picks)"))] + [
            (z.slug, f"{z.name} · {z.fabric_label} · {stock(rows)}") for z, rows in self.zones]

    def accelerator_choices(self, blank: str | None = None):
        rows = [("", blank)] if blank else []
        return rows + [(a.slug, gettext("%(name)s · %(free)s free") % {"name": a.name,
                                                                       "free": a.stock["available_cards"]})
                       for a in self.accelerators]


def _default_image(images):
    """The plain PyTorch image when the vendor has one (the most common start), else the first."""
    preferred = [i for i in images if i.slug.startswith(("pytorch", "cann-torch"))]
    return (preferred or images or [None])[0].slug if (preferred or images) else None


def no_maxlength(field: forms.CharField) -> forms.CharField:
    """Leave the length to the server: a browser's maxlength cuts a pasted 300-character name to 100 without a
    word; the form's max_length then says so instead."""
    field.widget.attrs.pop("maxlength", None)
    return field


class InstanceCreateForm(forms.Form):
    """Card mix (items or policy), kind, images per vendor, SSH keys, billing and waitlist."""

    name = no_maxlength(forms.CharField(max_length=100, initial="my-instance"))
    # One key per render of the form (Idempotency-Key, as the API's): two tabs of one render, a double click or
    # back + resubmit create one instance.
    idempotency_key = forms.CharField(required=False, max_length=255, widget=forms.HiddenInput)
    mode = forms.ChoiceField(choices=MODE_CHOICES, initial="items", widget=forms.RadioSelect)
    kind = forms.ChoiceField(choices=KIND_CHOICES, initial=InstanceKind.CONTAINER, widget=forms.RadioSelect)
    zone = forms.ChoiceField(required=False, label=gettext_lazy("Zone"))
    accelerator = forms.ChoiceField(required=False)
    count = forms.IntegerField(min_value=1, max_value=MAX_POLICY_CARDS, initial=1, required=False)
    accelerator2 = forms.ChoiceField(required=False, label=gettext_lazy("Second accelerator (hybrid)"))
    count2 = forms.IntegerField(min_value=1, max_value=MAX_POLICY_CARDS, required=False, label=gettext_lazy("Cards"))
    total_cards = forms.IntegerField(min_value=1, max_value=MAX_POLICY_CARDS, initial=8, required=False)
    compatible_vendors = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    min_domestic_percent = forms.IntegerField(min_value=0, max_value=100, initial=0, required=False,
                                              label=gettext_lazy("Minimum domestic share (%)"))
    billing = forms.ChoiceField(choices=BILLING_CHOICES, initial=BillingMode.ON_DEMAND, widget=forms.RadioSelect)
    package_renewal = forms.ChoiceField(choices=RENEWAL_CHOICES, initial=PackageRenewal.STOP, required=False,
                                        label=gettext_lazy("When the package ends"))
    ssh_key_ids = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label=gettext_lazy("SSH keys"))
    waitlist = forms.BooleanField(required=False, label=gettext_lazy("Join the waitlist if sold out"))
    # storage: the organization's volumes attached at create (default mount paths) and library entries read-only
    volumes = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label=gettext_lazy("Volumes"))
    datasets = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                         label=gettext_lazy("Datasets and models"))

    def __init__(self, *args, catalog: CatalogChoices, ssh_keys=(), volumes=(), datasets=(), custom_images=(),
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.catalog = catalog
        self.fields["idempotency_key"].initial = uuid.uuid4().hex
        self.fields["accelerator"].choices = catalog.accelerator_choices()
        self.fields["accelerator2"].choices = catalog.accelerator_choices(blank=gettext("— none —"))
        self.fields["compatible_vendors"].choices = [(v, VENDOR_LABELS.get(v, v)) for v in catalog.vendors]
        self.fields["zone"].choices = catalog.zone_choices()
        self.fields["ssh_key_ids"].choices = [(str(k.pk), f"{k.name} ({k.fingerprint})") for k in ssh_keys]
        # Every key ticked to start with (untick to leave one out): an instance with none cannot be logged into.
        self.fields["ssh_key_ids"].initial = [value for value, _ in self.fields["ssh_key_ids"].choices]
        self.fields["volumes"].choices = [(str(v.pk), v.picker_label) for v in volumes]
        self.fields["datasets"].choices = [(d.slug, d.picker_label) for d in datasets]
        if catalog.accelerators:
            self.fields["accelerator"].initial = catalog.accelerators[0].slug
        self.image_fields = []
        for vendor in catalog.vendors:
            images = catalog.images_by_vendor[vendor]
            name = f"image_{vendor}"
            # The organization's private images run in containers only (provisioning refuses them on bare metal).
            private = [(str(i.pk), f"{i.name} · {i.reference}") for i in custom_images if vendor in (i.vendors or [])]
            choices = [(i.slug, f"{i.name}") for i in images]
            if private:
                choices = [(_("Catalog"), choices), (_("Your organization's images (containers)"), private)]
            self.fields[name] = forms.ChoiceField(
                choices=choices, required=False,
                label=gettext('Image for %(get)s cards') % {'get': VENDOR_LABELS.get(vendor, vendor)},
                initial=_default_image(images))
            self.image_fields.append(self[name])

    def clean(self):
        data = super().clean()
        if data.get("mode") == "policy":
            if not data.get("total_cards"):
                self.add_error("total_cards", gettext("How many cards in total?"))
            if not data.get("compatible_vendors"):
                self.add_error("compatible_vendors", gettext("Tick at least one vendor."))
        else:
            if not data.get("accelerator"):
                self.add_error("accelerator", gettext("Pick an accelerator."))
            if not data.get("count"):
                self.add_error("count", gettext("How many cards?"))
            if data.get("accelerator2"):
                if data["accelerator2"] == data.get("accelerator"):
                    self.add_error("accelerator2", gettext("Pick a different accelerator, or raise the first count."))
                if not data.get("count2"):
                    self.add_error("count2", gettext("How many cards of the second accelerator?"))
        return data

    # --- what the services take --------------------------------------------------------------

    def submission(self) -> dict:
        """What was asked for, as the body its idempotency key is compared with (the key itself left out)."""
        return {k: v for k, v in self.cleaned_data.items() if k != "idempotency_key"}

    def items(self) -> tuple[Item, ...]:
        data = self.cleaned_data
        if data.get("mode") == "policy":
            return ()
        rows = [Item(data["accelerator"], data["count"])]
        if data.get("accelerator2") and data.get("count2"):
            rows.append(Item(data["accelerator2"], data["count2"]))
        return tuple(rows)

    def item_names(self) -> list[str]:
        """The items' accelerators by name, in the order the services number them (their refusals name them)."""
        return [getattr(self.catalog.by_slug.get(it.accelerator), "name", it.accelerator) for it in self.items()]

    def policy(self) -> Policy | None:
        data = self.cleaned_data
        if data.get("mode") != "policy":
            return None
        return Policy(data["total_cards"], tuple(data["compatible_vendors"]),
                      (data.get("min_domestic_percent") or 0) / 100)

    def images(self) -> dict[str, str]:
        """{vendor: image} for the vendors the request can use (a policy may pick any ticked vendor)."""
        data = self.cleaned_data
        if data.get("mode") == "policy":
            vendors = set(data.get("compatible_vendors") or ())
        else:
            vendors = {self.catalog.by_slug[it.accelerator].vendor for it in self.items()
                       if it.accelerator in self.catalog.by_slug}
        return {v: data.get(f"image_{v}") or "" for v in sorted(vendors)}

    def spec(self) -> InstanceSpec:
        """provisioning's InstanceSpec for instance_create / quote_compute."""
        return InstanceSpec(kind=self.cleaned_data["kind"], items=self.items(), policy=self.policy(),
                            zone=self.cleaned_data.get("zone") or None, images=self.images(),
                            billing=self.cleaned_data["billing"])


def attach_service_error(form: forms.Form, exc, *, items=1) -> None:
    """Show a service refusal next to the form: a 400's field details on their fields, anything else
    (quota, funds, capacity, state) as one message on top, worded for people (`items`: how many card rows the
    request had); the typed values stay in the bound form."""
    if exc.code != "validation_error":
        form.add_error(None, for_people(exc.message, items=items))
        return
    aliases = {"items": "accelerator", "policy": "total_cards"}
    for field, msgs in (exc.details or {}).items():
        target = aliases.get(field, field)
        for msg in msgs if isinstance(msgs, list) else [msgs]:
            form.add_error(target if target in form.fields else None, for_people(msg, items=items))
    if not exc.details:
        form.add_error(None, for_people(exc.message, items=items))


def form_errors_add(form, exc) -> None:
    """Attach a service refusal's (core.errors.ServiceError) details to the form's fields, or to the form itself."""
    for field, msgs in (exc.details or {}).items():
        for msg in msgs if isinstance(msgs, list) else [msgs]:
            form.add_error(field if field in form.fields else None, msg)
    if not exc.details:
        form.add_error(None, exc.message)
