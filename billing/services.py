"""The billing services other apps call (re-exported from the modules that implement them)."""
from .credits import cash_credit, cash_debit, compensation_grant, grant_credit, trial_expire, trial_grant
from .funds import available_funds, burn_rate_per_hour, funds_check, spend
from .metering import meter_cards_drop, meter_flag, meter_open, meter_post_now, meters_close, meters_pause

__all__ = [
    "available_funds", "burn_rate_per_hour", "cash_credit", "cash_debit", "compensation_grant", "funds_check",
    "grant_credit", "meter_cards_drop", "meter_flag", "meter_open", "meter_post_now", "meters_close", "meters_pause",
    "spend", "trial_expire", "trial_grant",
]
