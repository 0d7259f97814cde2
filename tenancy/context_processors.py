"""Template context: the current organization and membership."""


def current_organization(request):
    return {"current_org": getattr(request, "org", None), "current_membership": getattr(request, "membership", None)}
