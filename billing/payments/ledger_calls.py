"""The two ledger entry points payments uses (delivered by the ledger in billing/services.py).

Imported at call time so that payments loads even while the ledger module is being built, and so
the dependency is visible in one place.
"""


def cash_credit(*, org, amount: int, key: str, code: str, payment_ref: str = ""):
    """payments_clearing → cash, once per key (a replay returns the original transfer)."""
    from billing.services import cash_credit as _cash_credit

    return _cash_credit(org=org, amount=amount, key=key, code=code, payment_ref=payment_ref)


def cash_debit(*, org, amount: int, key: str, code: str, payment_ref: str = ""):
    """cash → payments_clearing, once per key; may take cash below zero (refunds)."""
    from billing.services import cash_debit as _cash_debit

    return _cash_debit(org=org, amount=amount, key=key, code=code, payment_ref=payment_ref)
