"""Landing page and dashboard."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render


def landing(request):
    """Public landing page; signed-in users go straight to their dashboard."""
    if request.user.is_authenticated:
        return redirect("console:dashboard")
    return render(request, "console/landing.html")


@login_required
def dashboard(request):
    """The customer's home: balances and running instances (filled as backends land)."""
    return render(request, "console/dashboard.html")
