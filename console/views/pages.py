"""Landing page (the dashboard lives in dashboard.py)."""
from django.shortcuts import redirect, render

from .dashboard import dashboard  # noqa: F401  (kept importable from here for old references)


def landing(request):
    """Public landing page; signed-in users go straight to their dashboard."""
    if request.user.is_authenticated:
        return redirect("console:dashboard")
    return render(request, "console/landing.html")
