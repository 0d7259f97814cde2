"""The two ledger entry points payments uses (delivered by the ledger in billing/services.py), so the
dependency is visible in one place."""
from billing import services as ledger


def cash_credit(*, org, amount: int, key: str, code: str, payment_ref: str = ""):
    """payments_clearing → cash, once per key (a replay returns the original transfer)."""
    return ledger.cash_credit(org=org, amount=amount, key=key, code=code, payment_ref=payment_ref)


def cash_debit(*, org, amount: int, key: str, code: str, payment_ref: str = ""):
    """cash → payments_clearing, once per key; may take cash below zero (refunds)."""
    return ledger.cash_debit(org=org, amount=amount, key=key, code=code, payment_ref=payment_ref)
