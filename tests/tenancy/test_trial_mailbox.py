"""One trial per mailbox: plus-addressing and the providers' documented dot rules fold an address to its mailbox
(tenancy/mailbox.py) for the trial rule; the login email stays as typed."""
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TestCase
from django.urls import reverse

from billing.funds import balances_of
from tenancy.mailbox import mailbox_key
from tenancy.models import Membership, TrialClaim, User
from tenancy.services import user_create_verified

from .test_accounts import PASSWORD, _verify_link_from_mail

KEYS = {
    "ada@gmail.com": "ada@gmail.com",
    "ada+1@gmail.com": "ada@gmail.com",
    "a.da@gmail.com": "ada@gmail.com",
    "A.D.A+trial+2@GMail.com": "ada@gmail.com",
    "ada@googlemail.com": "ada@gmail.com",
    "a.da+x@googlemail.com": "ada@gmail.com",
    "ada+1@outlook.com": "ada@outlook.com",
    "a.da+1@hotmail.com": "a.da@hotmail.com",  # Microsoft: dots count
    "ada@hotmail.com": "ada@hotmail.com",  # …and each domain is its own mailbox
    "ada+cloud@proton.me": "ada@proton.me",
    # No documented rule: left as they are.
    "ada+1@example.com": "ada+1@example.com",
    "a.da@example.com": "a.da@example.com",
    "a.da+1@qq.com": "a.da+1@qq.com",
    "a.da+1@163.com": "a.da+1@163.com",
    "ada@126.com": "ada@126.com",
    "ada+1@foxmail.com": "ada+1@foxmail.com",
    "+tag@gmail.com": "+tag@gmail.com",
}


@pytest.mark.parametrize("email", list(KEYS))
def test_mailbox_key_folds_only_documented_rules(email):
    assert mailbox_key(email) == KEYS[email]


def _trial(email) -> int:
    org = Membership.objects.get(user__email=email).organization
    return balances_of(org)["trial"]


@pytest.mark.django_db
def test_other_spellings_of_a_gmail_mailbox_get_no_second_trial(settings):
    """Before: ada+1@gmail.com and a.da@gmail.com after ada@gmail.com each got the trial credit again."""
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    user_create_verified(email="ada@gmail.com", password=PASSWORD)
    assert _trial("ada@gmail.com") == 10_000_000
    for again in ("ada+1@gmail.com", "a.da@gmail.com", "A.Da+x@googlemail.com"):
        user = user_create_verified(email=again, password=PASSWORD)
        user.refresh_from_db()
        assert user.email == again.lower() and user.email_verified_at is not None  # logs in as typed
        assert _trial(user.email) == 0, again
    claim = TrialClaim.objects.get()
    assert (claim.email, claim.mailbox) == ("ada@gmail.com", "ada@gmail.com")
    # Another mailbox still gets its trial: Microsoft counts dots, and example.com has no rule.
    for other in ("a.da@hotmail.com", "ada@hotmail.com", "a.da@example.com", "ada@example.com"):
        user_create_verified(email=other, password=PASSWORD)
        assert _trial(other) == 10_000_000, other


@pytest.mark.django_db
def test_signing_up_as_ada_plus_one_after_ada_verifies_without_a_trial(client, settings):
    """Through the console: sign-up and the verification link."""
    settings.TRIAL_CREDIT_UCNY = 10_000_000
    user_create_verified(email="ada@gmail.com", password=PASSWORD)
    with TestCase.captureOnCommitCallbacks(execute=True):
        r = client.post(reverse("console:signup"), {"email": "Ada+1@gmail.com", "name": "Ada", "password1": PASSWORD})
    assert r.status_code == 302
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert client.get(_verify_link_from_mail()).status_code == 302
    user = User.objects.get(email="ada+1@gmail.com")
    assert user.email_verified_at is not None and _trial(user.email) == 0
    assert TrialClaim.objects.filter(mailbox="ada@gmail.com").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_keys_existing_claims_by_mailbox_oldest_first():
    """Claims made before the key: the first of a mailbox holds it (a later spelling that already got a second
    trial keeps none), so a new spelling of either is refused."""
    executor = MigrationExecutor(connection)
    before, after = [("tenancy", "0003_tokens_ssh_keys_trial_claims")], [("tenancy", "0004_trialclaim_mailbox")]
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("tenancy", "TrialClaim")
        for i, email in enumerate(["a.da@gmail.com", "ada+1@gmail.com", "bob@example.com"]):
            old.objects.create(email=email)
            old.objects.filter(email=email).update(claimed_at=datetime(2026, 1, 1 + i, tzinfo=UTC))
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        keys = dict(TrialClaim.objects.values_list("email", "mailbox"))
        assert keys == {"a.da@gmail.com": "ada@gmail.com", "ada+1@gmail.com": None, "bob@example.com": "bob@example.com"}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    user_create_verified(email="ada@gmail.com", password=PASSWORD)
    assert _trial("ada@gmail.com") == 0
    assert TrialClaim.objects.count() == 3
