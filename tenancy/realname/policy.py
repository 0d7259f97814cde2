"""What an organization may do before its real-name verification is approved (settings REALNAME_*): by default
no H100/H800, no bare metal, and top-ups up to 100 CNY in all. Refusals are 403 `verification_required`."""
from django.conf import settings
from django.utils.translation import gettext, gettext_lazy

from core.errors import VerificationRequired
from core.money import format_fen

VERIFY_HINT = gettext_lazy("Verify your organization's real name in the console (Account → Real-name verification) "
                           "first.")


def org_unverified(org) -> bool:
    """Whether the policy limits this organization."""
    return settings.REALNAME_POLICY and org.real_name_verified_at is None


def accelerator_allowed(org, slug: str) -> bool:
    """Whether the organization may use this card type now."""
    return not (org_unverified(org) and slug.startswith(tuple(settings.REALNAME_UNVERIFIED_REFUSED_ACCELERATORS)))


def instance_check(org, *, accelerators=(), bare_metal: bool = False) -> None:
    """403 verification_required when an unverified organization asks for refused card types or bare metal."""
    if not org_unverified(org):
        return
    refused = sorted({slug for slug in accelerators if not accelerator_allowed(org, slug)})
    if refused:
        raise VerificationRequired(gettext("%(types)s needs a verified organization. %(hint)s")
                                   % {"types": ", ".join(refused), "hint": VERIFY_HINT},
                                   details={"accelerator": refused})
    if bare_metal and not settings.REALNAME_UNVERIFIED_BARE_METAL:
        raise VerificationRequired(gettext("Bare metal needs a verified organization. %(hint)s") % {"hint": VERIFY_HINT},
                                   details={"kind": ["bare_metal"]})


def topup_check(org, *, amount: int, already: int) -> None:
    """403 verification_required when this top-up would take an unverified organization's top-ups (`already`:
    µCNY of its top-ups that are paid or may still be) past REALNAME_UNVERIFIED_TOPUP_MAX_UCNY."""
    cap = settings.REALNAME_UNVERIFIED_TOPUP_MAX_UCNY
    if org_unverified(org) and already + amount > cap:
        left = max(cap - already, 0)
        raise VerificationRequired(
            gettext("An unverified organization tops up at most %(cap)s CNY in all (%(left)s CNY left). %(hint)s")
            % {"cap": format_fen(cap), "left": format_fen(left), "hint": VERIFY_HINT},
            details={"amount": [gettext("At most %(left)s CNY before verification.") % {"left": format_fen(left)}]})


def policy_summary() -> dict:
    """The limits, for the API and the console."""
    return {"enabled": settings.REALNAME_POLICY,
            "refused_accelerators": list(settings.REALNAME_UNVERIFIED_REFUSED_ACCELERATORS),
            "bare_metal": settings.REALNAME_UNVERIFIED_BARE_METAL,
            "topup_max": settings.REALNAME_UNVERIFIED_TOPUP_MAX_UCNY}


def realname_limits_text(org) -> str:
    """What the organization may not use yet, in words ("" when nothing is limited), for the console's banners."""
    if not org_unverified(org):
        return ""
    types = ", ".join(p.upper() for p in settings.REALNAME_UNVERIFIED_REFUSED_ACCELERATORS)
    parts = [gettext("%(types)s cards") % {"types": types}] if types else []
    if not settings.REALNAME_UNVERIFIED_BARE_METAL:
        parts.append(gettext("bare metal"))
    return gettext(" and ").join(parts)
