"""Emails to people, each in their own language, from a request or a background task alike.

Background tasks run in the default language (English), so a message rendered there would reach a Chinese user in
English. `send_to_people` groups the recipients by their language (User.language, else the active one, else the
default: core.i18n.language_of) and renders one message per group, so each person reads theirs, while the people of
one language still share one message (as the single message to all did before)."""
from collections.abc import Callable, Iterable

from django.core.mail import send_mail
from django.db import transaction
from django.utils import translation

from .i18n import language_of, supported_language


def person(email: str, language: str = "") -> tuple[str, str]:
    """A recipient who may have no account (an invitation's address): their email and the language to write in
    (blank: the active one)."""
    return (email or "", language or "")


def _language(code: str) -> str:
    return supported_language(code) or language_of(None)


def by_language(people: Iterable) -> dict[str, list[str]]:
    """{language: sorted emails}: `people` are users (anything with .email and .language) or (email, language)
    pairs; blank addresses and repeats (the first one counts) are dropped."""
    groups: dict[str, list[str]] = {}
    seen: set[str] = set()
    for p in people:
        email, language = p if isinstance(p, tuple) else (getattr(p, "email", ""), getattr(p, "language", ""))
        if not email or email.lower() in seen:
            continue
        seen.add(email.lower())
        groups.setdefault(_language(language), []).append(email)
    return {lang: sorted(emails) for lang, emails in sorted(groups.items())}


def send_to_people(people: Iterable, render: Callable[[], tuple[str, str]], *, fail_silently: bool = True) -> int:
    """Email `render()` → (subject, body) to `people`, rendered once per language under that language, and sent when
    the current transaction commits (at once outside one). Rendered now, so the message says what the caller's
    transaction sees. → how many people it goes to (0: nobody to tell, nothing sent)."""
    messages = []
    for language, emails in by_language(people).items():
        with translation.override(language):
            subject, body = render()
        messages.append((str(subject), str(body), emails))

    def send():
        for subject, body, emails in messages:
            send_mail(subject, body, None, emails, fail_silently=fail_silently)

    if messages:
        transaction.on_commit(send)
    return sum(len(emails) for _, _, emails in messages)

