"""`8xH100`, `2xascend+2xh100`: card mixes as the CLI and task files write them, resolved against the catalog."""
import re

from .errors import ValidationError

_ITEM = re.compile(r"^\s*(?:(\d+)\s*[x×*]\s*)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*$")
_COLON = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*:\s*(\d+)\s*$")  # SkyPilot's H100:8


def cards_parse(text: str) -> list[tuple[int, str]]:
    """[(count, accelerator token)] of `8xH100`, `H100:8`, `H100` (one card) or `+`-joined mixes."""
    out = []
    for part in (text or "").split("+"):
        m = _COLON.match(part)
        if m:
            out.append((int(m.group(2)), m.group(1)))
            continue
        m = _ITEM.match(part)
        if not m:
            raise ValidationError(f"Cannot read the card mix {text!r}: write it like 8xH100 or 4xH100+4xAscend.",
                                  details={"cards": [text]})
        out.append((int(m.group(1) or 1), m.group(2)))
    if any(count < 1 for count, _ in out):
        raise ValidationError("A card count is at least 1.", details={"cards": [text]})
    return out


def accelerator_resolve(token: str, accelerators) -> str:
    """The catalog slug a token names: the slug itself, or the one slug or name it starts or is contained in."""
    t = token.lower()
    slugs = {a.slug: a for a in accelerators}
    if t in slugs:
        return t
    hits = [a.slug for a in accelerators if a.slug.startswith(t)] or \
        [a.slug for a in accelerators if t in a.slug or t in a.name.lower().replace(" ", "")]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(sorted(slugs))
    if not hits:
        raise ValidationError(f"No accelerator is called {token!r}; the catalog has {known}.",
                              details={"accelerator": [token]})
    raise ValidationError(f"{token!r} could be {', '.join(sorted(hits))}; name one.", details={"accelerator": [token]})


def items_of(text: str, accelerators) -> list[dict]:
    return [{"accelerator": accelerator_resolve(token, accelerators), "count": count}
            for count, token in cards_parse(text)]


def image_default(items: list[dict], accelerators, images) -> dict:
    """{"image": slug} (one vendor) or {"images": {vendor: slug}} (a hybrid): the catalog's first image per vendor."""
    vendor_of = {a.slug: a.vendor for a in accelerators}
    vendors = sorted({vendor_of[i["accelerator"]] for i in items})
    chosen = {}
    for vendor in vendors:
        slug = next((im.slug for im in images if vendor in im.vendors), None)
        if slug is None:
            raise ValidationError(f"The catalog has no image for {vendor}; name one with --image.",
                                  details={"image": [vendor]})
        chosen[vendor] = slug
    return {"image": chosen[vendors[0]]} if len(vendors) == 1 else {"images": chosen}
