"""Display names for the catalog slugs that services and billing rows speak in.

Customers read "NVIDIA H100 SXM 80GB", never `h100-sxm-80g`; slugs stay where they are identifiers (form
values, the API, CSV exports)."""
import re

from django.utils.translation import gettext_lazy

from inventory.selectors import accelerator_names

# Vendors in messages and tables (the create form's vendor picker says more: forms.VENDOR_LABELS).
VENDOR_NAMES = {"nvidia": "NVIDIA", "huawei": gettext_lazy("Huawei"), "moore_threads": gettext_lazy("Moore Threads"), "iluvatar": gettext_lazy("Iluvatar")}


def named(text: str) -> str:
    """A service's message as the console shows it: accelerator slugs (quoted or not) replaced by their names,
    first letter capitalised. Services keep slugs because the API's callers send and match them."""
    text = str(text)
    names = accelerator_names() if text else {}
    if names:
        slugs = "|".join(re.escape(s) for s in sorted(names, key=len, reverse=True))  # longest first
        text = re.sub(rf"(?<![\w-])'?({slugs})'?(?![\w-])", lambda m: names[m.group(1)], text)
    return text[:1].upper() + text[1:]
