"""Abuse from the outside, through the console and the real billing trial hook (SPEC §2)."""
import re

import pytest
from django.core import mail
from django.urls import reverse

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-enough-passphrase-42"


def _signup(client, email):
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(reverse("console:signup"), {"name": "Eve", "email": email, "password1": PASSWORD})


def _verify_link() -> str:
    return re.search(r"https?://[^/\s]+(/accounts/confirm-email/\S+/)", mail.outbox[-1].body).group(1)


def _trial_balance(user) -> str:
    from rest_framework.test import APIClient

    from tenancy.middleware import SESSION_ORG_KEY
    from tenancy.models import Membership

    client = APIClient()
    client.force_login(user)
    session = client.session
    session[SESSION_ORG_KEY] = str(Membership.objects.filter(user=user).latest("pk").organization_id)
    session.save()
    return client.get("/api/v1/billing/balance/").json()["trial"]


def test_one_trial_per_verified_email_with_the_real_ledger(client, settings):
    from billing.models import Transfer
    from tenancy.models import User

    assert _signup(client, "Mallory@Example.com").status_code == 302
    user = User.objects.get(email="mallory@example.com")
    assert _trial_balance(user) == "0.000000"  # nothing before verification
    link = _verify_link()
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        client.get(link)
        client.get(link)  # clicking twice is harmless
    expected = f"{settings.TRIAL_CREDIT_UCNY / 1_000_000:.6f}"
    assert _trial_balance(user) == expected
    trials = Transfer.objects.filter(key__startswith="trial:").count()
    # Delete the account and sign up again with the same address in other case: no second trial.
    user.delete()
    client.logout()
    assert _signup(client, "MALLORY@example.COM").status_code == 302
    with TestCase.captureOnCommitCallbacks(execute=True):
        client.get(_verify_link())
    again = User.objects.get(email="mallory@example.com")
    assert _trial_balance(again) == "0.000000"
    assert Transfer.objects.filter(key__startswith="trial:").count() == trials


@pytest.mark.parametrize("email", ["x@mailinator.com", "x@eu.mailinator.com", "X@MAILINATOR.COM"])
def test_refused_email_domains(client, settings, email):
    from tenancy.models import User

    settings.REFUSED_EMAIL_DOMAINS = ["mailinator.com"]
    response = _signup(client, email)
    assert response.status_code == 200  # the form again, with the refusal
    assert not User.objects.filter(email=email.lower()).exists()
    assert len(mail.outbox) == 0
