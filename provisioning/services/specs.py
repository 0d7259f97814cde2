"""A create/quote request turned into placement terms, with the checks that need the database."""
from dataclasses import dataclass, field

from django.utils.translation import gettext

from core.errors import ValidationFailed
from inventory.models import Image, Zone
from inventory.selectors import custom_images_by_ids

from ..choices import BillingMode
from ..placement import INVALID_REQUEST, AcceleratorInfo, Item, PlacementRequest, PlacementResult, Policy


@dataclass(frozen=True)
class InstanceSpec:
    """What the customer asked for (already shape-checked by the API serializer)."""

    kind: str
    items: tuple[Item, ...] = ()
    policy: Policy | None = None
    zone: str | None = None
    image: str = ""
    images: dict = field(default_factory=dict)
    billing: str = BillingMode.ON_DEMAND

    def placement_request(self) -> PlacementRequest:
        """The engine's request (items or policy, kind, zone)."""
        return PlacementRequest(kind=self.kind, items=self.items, policy=self.policy, zone=self.zone)


def spec_from_data(data: dict) -> InstanceSpec:
    """Build a spec from validated serializer data."""
    policy = data.get("policy")
    return InstanceSpec(
        kind=data["kind"],
        items=tuple(Item(i["accelerator"], i["count"]) for i in data.get("items") or ()),
        policy=Policy(policy["total_cards"], tuple(policy["compatible_vendors"]),
                      float(policy.get("min_domestic_share", 0.0))) if policy else None,
        zone=data.get("zone") or None,
        image=data.get("image") or "",
        images=dict(data.get("images") or {}),
        billing=data.get("billing") or BillingMode.ON_DEMAND,
    )


def spec_check(spec: InstanceSpec, catalog: dict[str, AcceleratorInfo]) -> None:
    """Accelerators orderable and zone known → else 400 validation_error with details."""
    details: dict[str, list[str]] = {}
    for i, item in enumerate(spec.items):
        if item.accelerator not in catalog:
            details.setdefault("items", []).append(f"item {i}: " + gettext("%(accelerator)s is not an orderable "
                                                                          "accelerator.") % {"accelerator": repr(item.accelerator)})
    if spec.policy is not None and not any(info.vendor in spec.policy.compatible_vendors
                                           for info in catalog.values()):
        details["policy"] = [gettext("No orderable accelerator is made by the compatible vendors.")]
    if spec.zone and not Zone.objects.filter(slug=spec.zone).exists():
        details["zone"] = [gettext("Unknown zone %(zone)s.") % {"zone": repr(spec.zone)}]
    if details:
        raise ValidationFailed(gettext("The request is invalid."), details=details)


def placement_invalid(result: PlacementResult) -> None:
    """Turn the engine's invalid_request into a 400 (capacity shortfalls are the caller's business)."""
    if not result.ok and result.error_code == INVALID_REQUEST:
        field_name = "policy" if result.message.startswith("policy") else "items"
        raise ValidationFailed(gettext("The request is invalid."),
                               details={field_name: placement_message(result).split("\n")})


def _problem(problem) -> str:
    return gettext(problem.msgid) % problem.values


def placement_message(result: PlacementResult) -> str:
    """Why the engine refused, in the request's language (the engine keeps English and its msgids: it imports no
    Django): its problems, one line each ("item <index>: " stays, callers match it), or what capacity is short."""
    lines = getattr(result.message, "lines", None)
    if lines is not None:
        return "\n".join(_problem(p) if i is None else f"item {i}: {_problem(p)}" for i, p in lines)
    if getattr(result.message, "msgid", None):
        return _problem(result.message)
    if result.missing:
        return gettext("not enough free capacity: %(missing)s") % {"missing": ", ".join(
            gettext("%(accelerator)s short by %(count)s") % {"accelerator": acc, "count": n}
            for acc, n in sorted(result.missing.items()))}
    return result.message or gettext("Not enough free capacity now.")


def images_resolve(spec: InstanceSpec, items, catalog: dict[str, AcceleratorInfo], *, org=None) -> dict[str, str]:
    """{vendor: image} for the chosen mix: a catalog slug, or the id of one of `org`'s ready private images (a
    container only); each must run on its vendor (400 otherwise; another organization's image id is unknown)."""
    vendors = sorted({catalog[item.accelerator].vendor for item in items})
    wanted = {v: spec.image for v in vendors} if spec.image else {v: spec.images.get(v, "") for v in vendors}
    slugs = [s for s in wanted.values() if s]
    found = {img.slug: img for img in Image.objects.filter(slug__in=slugs, active=True)}
    private = custom_images_by_ids(org=org, ids=[s for s in slugs if s not in found]) if org is not None else {}
    details: list[str] = []
    for vendor, slug in wanted.items():
        runs_on = (found[slug].vendors if slug in found else private[slug].vendors if slug in private else None)
        if not slug:
            # The request syntax in parentheses stays as written: the console drops it (service_text.REQUEST_SYNTAX).
            details.append(gettext("Name an image for %(vendor)s") % {"vendor": vendor}
                           + f" (hybrid: images: {{\"{vendor}\": …}}).")
        elif runs_on is None:
            details.append(gettext("Unknown image %(image)s.") % {"image": repr(slug)})
        elif vendor not in (runs_on or []):
            details.append(gettext("Image %(image)s does not run on %(vendor)s accelerators.")
                           % {"image": repr(slug), "vendor": vendor})
        elif slug in private and spec.kind != "container":
            details.append(gettext("Image %(image)s is a private container image: bare-metal nodes boot the "
                                   "catalog's images only.") % {"image": repr(slug)})
    if details:
        raise ValidationFailed(gettext("The request is invalid."), details={"image" if spec.image else "images": details})
    return wanted
