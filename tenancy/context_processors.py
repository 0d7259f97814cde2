"""Template context: the current organization and membership, and which console sections the role may open."""
from .permissions import role_can


def current_organization(request):
    membership = getattr(request, "membership", None)
    role = getattr(membership, "role", None)
    return {"current_org": getattr(request, "org", None), "current_membership": membership,
            # The nav shows only sections the role can read (a viewer has no Billing, a billing member no Instances).
            "nav_can": {"instances": bool(role) and role_can(role, "read"),
                        "billing": bool(role) and role_can(role, "read_billing"),
                        "webhooks": bool(role) and role_can(role, "webhooks")}}
