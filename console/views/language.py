"""The header's language switch: Django's set_language (cookie), and the user's own setting when logged in."""
from django.views.decorators.http import require_POST
from django.views.i18n import set_language as django_set_language

from core.i18n import supported_language
from tenancy.services import user_language_set


@require_POST
def set_language(request):
    """POST language=<code>, next=<path> (CSRF-checked): sets the cookie and, for a logged-in user, their setting,
    so the choice follows them to other browsers and into emails."""
    response = django_set_language(request)
    code = supported_language(request.POST.get("language"))
    if code and request.user.is_authenticated:
        user_language_set(user=request.user, language=code)
    return response
