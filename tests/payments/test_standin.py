"""Stand-in payments (`make run` on embedded defaults): a top-up's intent waits for the stand-in Stripe.js's 3-D
Secure answer; production refuses the setting. The browser flow is tests/e2e/test_make_run_topup.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from billing.payments.services import topup_create
from tests.payments.conftest import localstripe_url, stripe_env  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_a_stand_in_top_up_waits_for_the_3d_secure_answer(stripe_env, member_factory):  # noqa: F811
    import stripe

    owner = member_factory(role="owner")
    stripe_env.STRIPE_STANDIN = False
    plain = topup_create(org=owner.organization, amount=20_000_000)
    assert stripe.PaymentIntent.retrieve(plain.stripe_payment_intent_id).status == "requires_payment_method"
    stripe_env.STRIPE_STANDIN = True
    topup = topup_create(org=owner.organization, amount=50_000_000)
    intent = stripe.PaymentIntent.retrieve(topup.stripe_payment_intent_id)
    assert intent.status == "requires_action" and intent.amount == 5000 and topup.client_secret


def test_production_refuses_stand_in_payments():
    env = {**os.environ, "CARDMIX_ENV": "production", "SECRET_KEY": "x" * 50, "STRIPE_STANDIN": "1",
           "BMC_CREDENTIALS_KEY": "A" * 43 + "="}
    done = subprocess.run([sys.executable, "-c", "import django, os; os.environ['DJANGO_SETTINGS_MODULE']="
                           "'config.settings'; from django.conf import settings; settings.STRIPE_STANDIN"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "STRIPE_STANDIN" in done.stderr, done.stderr[-2000:]
    env["STRIPE_STANDIN"] = "0"
    done = subprocess.run([sys.executable, "-c", "import os; os.environ['DJANGO_SETTINGS_MODULE']="
                           "'config.settings'; from django.conf import settings; print(settings.STRIPE_STANDIN)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
