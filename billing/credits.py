"""Money coming in and going out of an organization: trial credit and its expiry, SLA compensation,
cash top-ups and refunds. Each posts once per idempotency key."""
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from core.dbclock import db_now
from core.metrics import SLA_BREACHES_TOTAL
from tenancy.audit import audit_record

from .choices import AccountKind, TransferCode
from .ledger import Leg, accounts_lock_all, leg_post, org_account_ids, platform_id
from .lock_objects import profile_lock
from .models import Transfer


def _org_id(org):
    """An organization or its id → its UUID."""
    org_id = getattr(org, "pk", org)
    return org_id if isinstance(org_id, uuid.UUID) else uuid.UUID(str(org_id))


def _post_once(*, org, key: str, debit_id: int, credit_id: int, amount: int, code: str, action: str, actor=None,
               payment_ref: str = "", grant_ref: str = "", details: dict | None = None) -> Transfer:
    """Post one transfer; audit it only the first time (a replay returns the original)."""
    if amount <= 0:
        raise ValueError(f"amount must be > 0 µCNY, got {amount}")
    with transaction.atomic():
        fresh = not Transfer.objects.filter(key=key).exists()
        transfer = leg_post(Leg(key=key, debit_id=debit_id, credit_id=credit_id, amount=amount, code=code,
                                payment_ref=payment_ref, grant_ref=grant_ref))
        if fresh:
            audit_record(action=action, org=org if hasattr(org, "pk") else None, actor=actor, target=transfer,
                         details={"key": key, "amount": amount, **(details or {})})
        return transfer


def trial_grant(*, org, user=None) -> Transfer | None:
    """Give a new organization its trial credit once (`trial:<org>`), expiring after TRIAL_DAYS."""
    amount = settings.TRIAL_CREDIT_UCNY
    if amount <= 0:
        return None
    org_id = _org_id(org)
    ids = org_account_ids([org_id])[org_id]
    with transaction.atomic():
        profile = profile_lock(org_id)
        transfer = _post_once(org=org, key=f"trial:{org_id}", debit_id=platform_id(AccountKind.PROMOTIONS),
                              credit_id=ids[AccountKind.TRIAL], amount=amount, code=TransferCode.TRIAL,
                              action="billing.trial_grant", actor=user)
        if profile.trial_expires_at is None:
            profile.trial_expires_at = db_now() + timedelta(days=settings.TRIAL_DAYS)
            profile.save(update_fields=["trial_expires_at"])
        return transfer


def trial_expire(*, org) -> Transfer | None:
    """Move exactly the trial remainder to `expired_credit` once (`trial_expiry:<org>`); None if nothing is left."""
    org_id = _org_id(org)
    ids = org_account_ids([org_id])[org_id]
    with transaction.atomic():
        profile = profile_lock(org_id)
        key = f"trial_expiry:{org_id}"
        existing = Transfer.objects.filter(key=key).first()
        if existing is not None or profile.trial_expired_at is not None:
            return existing
        # Lock trial (and expired_credit) so no spend moves the remainder while we read it.
        accounts = accounts_lock_all([ids[AccountKind.TRIAL], platform_id(AccountKind.EXPIRED_CREDIT)])
        remainder = accounts[ids[AccountKind.TRIAL]].balance
        transfer = None
        if remainder > 0:
            transfer = leg_post(Leg(key=key, debit_id=ids[AccountKind.TRIAL],
                                    credit_id=platform_id(AccountKind.EXPIRED_CREDIT), amount=remainder,
                                    code=TransferCode.TRIAL_EXPIRY))
        profile.trial_expired_at = db_now()
        profile.save(update_fields=["trial_expired_at"])
        audit_record(action="billing.trial_expire", org=org if hasattr(org, "pk") else None,
                     target_type="tenancy.organization", target_id=org_id, details={"amount": remainder})
        return transfer


def compensation_grant(*, org, breach_id: str, amount: int) -> Transfer:
    """Credit SLA compensation once per breach (`sla:<breach id>`), from promotions into compensation."""
    org_id = _org_id(org)
    ids = org_account_ids([org_id])[org_id]
    if not Transfer.objects.filter(key=f"sla:{breach_id}").exists():  # observability: count each breach once
        transaction.on_commit(SLA_BREACHES_TOTAL.inc)
    return _post_once(org=org, key=f"sla:{breach_id}", debit_id=platform_id(AccountKind.PROMOTIONS),
                      credit_id=ids[AccountKind.COMPENSATION], amount=amount, code=TransferCode.SLA,
                      action="billing.compensation_grant", grant_ref=str(breach_id),
                      details={"breach_id": str(breach_id)})


def cash_credit(*, org, amount: int, key: str, code: str, payment_ref: str = "") -> Transfer:
    """Credit cash from payments_clearing once per key (e.g. `stripe_pi:<id>`)."""
    org_id = _org_id(org)
    ids = org_account_ids([org_id])[org_id]
    return _post_once(org=org, key=key, debit_id=platform_id(AccountKind.PAYMENTS_CLEARING),
                      credit_id=ids[AccountKind.CASH], amount=amount, code=code, action="billing.cash_credit",
                      payment_ref=payment_ref)


def cash_debit(*, org, amount: int, key: str, code: str, payment_ref: str = "") -> Transfer:
    """Debit cash into payments_clearing once per key (refunds; may take cash below zero)."""
    org_id = _org_id(org)
    ids = org_account_ids([org_id])[org_id]
    return _post_once(org=org, key=key, debit_id=ids[AccountKind.CASH],
                      credit_id=platform_id(AccountKind.PAYMENTS_CLEARING), amount=amount, code=code,
                      action="billing.cash_debit", payment_ref=payment_ref)


def grant_credit(*, org, amount: int, key: str, grant_ref: str = "", actor=None) -> Transfer:
    """Credit a sponsorship grant once per key (`grant:<proposal id>`), from promotions into grant."""
    org_id = _org_id(org)
    ids = org_account_ids([org_id])[org_id]
    return _post_once(org=org, key=key, debit_id=platform_id(AccountKind.PROMOTIONS),
                      credit_id=ids[AccountKind.GRANT], amount=amount, code=TransferCode.GRANT,
                      action="billing.grant_credit", actor=actor, grant_ref=grant_ref)


def trial_expire_due(*, limit: int = 1000) -> int:
    """Expire every trial whose deadline passed by the database clock; returns how many were expired."""
    from django.db.models.functions import Now

    from .models import BillingProfile

    due = list(BillingProfile.objects.filter(trial_expires_at__lte=Now(), trial_expired_at__isnull=True)
               .order_by("trial_expires_at").values_list("organization_id", flat=True)[:limit])
    for org_id in due:
        trial_expire(org=org_id)
    return len(due)


def credit_limit_set(*, org, credit_limit: int, actor=None, request=None):
    """Set an organization's postpaid credit limit (µCNY, ≥ 0); operators only, audited."""
    from .models import BillingProfile

    if credit_limit < 0:
        raise ValueError("credit limit must be >= 0 µCNY")
    with transaction.atomic():
        profile = profile_lock(_org_id(org))
        old = profile.credit_limit
        if old != credit_limit:
            BillingProfile.objects.filter(pk=profile.pk).update(credit_limit=credit_limit)
            profile.credit_limit = credit_limit
            audit_record(action="billing.credit_limit_set", org=profile.organization, actor=actor,
                         target=profile.organization, request=request, details={"old": old, "new": credit_limit})
        return profile
