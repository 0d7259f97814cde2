"""Billing: trial credit, metering and the ledger, payments (Stripe), top-ups and monthly packages."""
from core.settings_registry import section, setting

section("Billing", "Product settings default to the values of [the spec](/spec.md) (money in µCNY: 1 CNY = "
        "1,000,000). Payments go through Stripe; with none of `STRIPE_API_KEY`, `STRIPE_API_BASE` and "
        "`STRIPE_JS_URL` set, `make run` starts localstripe as a Stripe stand-in.")

# --- Trial, funds and metering (docs/spec.md) -----------------------------------------------------------------------
TRIAL_CREDIT_UCNY = setting("TRIAL_CREDIT_UCNY", "int", 10_000_000,
                            "trial credit granted when an organization's first address is verified (10 CNY)")
TRIAL_DAYS = setting("TRIAL_DAYS", "int", 30, "days the trial credit lasts")
FUNDS_MIN_MINUTES = setting("FUNDS_MIN_MINUTES", "int", 10,
                            "creating or starting an instance, or creating a volume, needs funds for this many "
                            "minutes of its price (else 402 `insufficient_funds`)")
METER_TICK_SECONDS = setting("METER_TICK_SECONDS", "int", 60, "how often beat posts every open meter's charges")
LOW_BALANCE_WARNING_SECONDS = setting("LOW_BALANCE_WARNING_SECONDS", "int", 3600,
                                      "`balance.low` (email, banner, webhook) at this much remaining burn")
# Incremental ledger verification checkpoints only transfers at least this old (no posting transaction stays
# open longer): see billing/verify.py.
VERIFY_SETTLE_SECONDS = setting("VERIFY_SETTLE_SECONDS", "int", 600,
                                "the beat's incremental ledger verification checkpoints only transfers at least this "
                                "old (longer than any posting transaction stays open); `manage.py verify_ledger` runs "
                                "in full, `--incremental` as the beat does")
MONTHLY_DISCOUNT = setting("MONTHLY_DISCOUNT", "float", 0.65,
                           "a monthly package's default rate = floor(on-demand rate × this)")

# --- Payments (billing/payments) ------------------------------------------------------------------------------------
STRIPE_API_KEY = setting("STRIPE_API_KEY", "str", "sk_test_cardmix_dev", "Stripe's secret API key",
                         doc_default="a test value")
STRIPE_PUBLISHABLE_KEY = setting("STRIPE_PUBLISHABLE_KEY", "str", "pk_test_cardmix_dev",
                                 "Stripe's publishable key (the console's payment form)", doc_default="a test value")
STRIPE_WEBHOOK_SECRET = setting("STRIPE_WEBHOOK_SECRET", "str", "whsec_cardmix_dev",
                                "the signing secret of Stripe's webhook to `/api/v1/billing/stripe/webhook/`",
                                doc_default="a test value")
STRIPE_API_BASE = setting("STRIPE_API_BASE", "url", "", "Stripe's API address, when it is not Stripe's own "
                          "(localstripe)")
STRIPE_JS_URL = setting("STRIPE_JS_URL", "url", "https://js.stripe.com/v3/",
                        "Stripe.js, loaded by the payment page (card data never touches our server)")
# Extra Stripe payment method types besides card, e.g. "alipay,wechat_pay" (only where the
# Stripe account supports them); the console shows their buttons when listed.
STRIPE_EXTRA_PAYMENT_METHODS = setting("STRIPE_EXTRA_PAYMENT_METHODS", "list", [],
                                       "Stripe payment method types besides card, e.g. `alipay,wechat_pay` (where the "
                                       "Stripe account supports them); the console shows their buttons")
# Set by `make run` (manage.py runall) for web, worker and beat when it starts localstripe, a local Stripe stand-in,
# on embedded defaults: top-ups are test payments there (billing/payments/standin.py). Refused in production.
STRIPE_STANDIN = setting("STRIPE_STANDIN", "bool", False,
                         "test payments at localstripe: each top-up's intent gets its 3-D Secure test card, the page's "
                         "*Complete authentication* pays it; `0` stops `make run` from starting the stand-in; refused "
                         "in production", doc_default="off (`make run` sets it)")
STRIPE_WEBHOOK_TOLERANCE_SECONDS = setting("STRIPE_WEBHOOK_TOLERANCE_SECONDS", "int", 300,
                                           "how far a Stripe webhook's signed timestamp may be from now")
# Reconciliation looks at PaymentIntents created in the last N hours, at most M of them per run.
STRIPE_RECONCILE_HOURS = setting("STRIPE_RECONCILE_HOURS", "int", 72,
                                 "payment reconciliation looks at PaymentIntents created in the last this many hours")
STRIPE_RECONCILE_MAX_INTENTS = setting("STRIPE_RECONCILE_MAX_INTENTS", "int", 2000,
                                       "at most this many PaymentIntents per reconciliation run")
TOPUP_MIN_UCNY = setting("TOPUP_MIN_UCNY", "int", 10_000_000, "the smallest top-up (10 CNY)")
TOPUP_MAX_UCNY = setting("TOPUP_MAX_UCNY", "int", 100_000_000_000, "the largest top-up (100,000 CNY)")
