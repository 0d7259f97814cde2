"""Template context every console page shares: the banner of volumes that will be deleted for unpaid funds."""
from functools import cached_property

from storage.retention import retention_warnings
from tenancy.permissions import role_can


class _VolumeDeletions:
    """The organization's warned volumes, read only when a page renders the banner (one query, then kept)."""

    def __init__(self, org):
        self.org = org

    @cached_property
    def rows(self) -> list[dict]:
        return retention_warnings(org=self.org) if self.org is not None else []

    def __bool__(self):
        return bool(self.rows)

    def __iter__(self):
        return iter(self.rows)


def volume_deletions(request):
    """Shown on every page to members who read instances or billing: nothing is deleted without a warning."""
    role = getattr(getattr(request, "membership", None), "role", None)
    shown = bool(role) and (role_can(role, "read") or role_can(role, "read_billing"))
    return {"volume_deletions": _VolumeDeletions(getattr(request, "org", None) if shown else None),
            "volume_deletions_can_top_up": bool(role) and role_can(role, "billing")}
