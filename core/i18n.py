"""i18n helpers shared by the apps: the language a message to one person is written in."""
from django.conf import settings
from django.utils import translation


def language_of(user) -> str:
    """The person's own language (User.language), else the active one (the request's), else the default."""
    return getattr(user, "language", "") or translation.get_language() or settings.LANGUAGE_CODE


def in_language_of(user):
    """`with in_language_of(user):` an email or notice rendered in its recipient's language, also from a task."""
    return translation.override(language_of(user))


def supported_language(code: str | None) -> str:
    """A code of settings.LANGUAGES ("zh-hans" for "zh-cn" or "zh-Hans"), or "" when none matches."""
    if not code:
        return ""
    try:
        return translation.get_supported_language_variant(code.strip().lower())
    except LookupError:
        return ""
