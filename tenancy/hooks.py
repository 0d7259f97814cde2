"""Hooks a higher app registers so tenancy can call it without importing it (billing grants the trial)."""
import logging

logger = logging.getLogger("cardmix.tenancy")

_trial_grant_fn = None


def register_trial_grant(fn) -> None:
    """Billing registers `fn(*, org, user)` (usually from its AppConfig.ready)."""
    global _trial_grant_fn
    _trial_grant_fn = fn


def trial_grant(*, org, user) -> None:
    """Grant the trial credit through the registered hook; a no-op when none is registered."""
    if _trial_grant_fn is None:
        logger.info("no trial grant hook registered; trial not granted", extra={"org": str(org.pk)})
        return
    _trial_grant_fn(org=org, user=user)
