"""Incremental ledger verification: it sums only the transfers after its checkpoint, advances the checkpoint over
settled transfers only, and finds the same differences as the full run (which the beat's run confirms)."""
import pytest
from django.db import connection

from billing.models import Account, AccountCheckpoint, LedgerCheckpoint, Transfer
from billing.verify import ledger_verify, ledger_verify_locked
from tests.factories.billing import fund
from tests.factories.tenancy import OrganizationFactory

pytestmark = pytest.mark.django_db


def _age_transfers(seconds: int) -> None:
    """Move every transfer back in time (the immutability trigger is bypassed for this session only)."""
    with connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute("UPDATE billing_transfer SET created_at = created_at - make_interval(secs => %s)", [seconds])
        cur.execute("SET LOCAL session_replication_role = origin")


def test_checkpoint_advances_over_settled_transfers_only_and_totals_stay_exact(settings):
    settings.VERIFY_SETTLE_SECONDS = 600
    org = OrganizationFactory()
    fund(org, 5_000, key="old-1")
    fund(org, 7_000, key="old-2")
    _age_transfers(3600)
    fund(org, 11_000, key="young")  # not settled: stays after the checkpoint
    assert ledger_verify(full=False) == []
    cp = LedgerCheckpoint.objects.get()
    old = Transfer.objects.filter(key__in=["old-1", "old-2"])
    assert cp.through_transfer_id == max(t.pk for t in old)
    cash = Account.objects.get(organization=org, kind="cash")
    assert AccountCheckpoint.objects.get(account=cash).total == 12_000
    assert AccountCheckpoint.objects.get(account_id=-1).total == -12_000
    # The next run adds the young transfer on top of the checkpoint, once it has settled too.
    _age_transfers(3600)
    assert ledger_verify(full=False) == []
    assert LedgerCheckpoint.objects.get().through_transfer_id == Transfer.objects.get(key="young").pk
    assert AccountCheckpoint.objects.get(account=cash).total == 23_000
    assert ledger_verify(full=False) == [] == ledger_verify(full=True)


def test_a_settled_transfer_behind_an_unsettled_one_holds_the_checkpoint(settings):
    settings.VERIFY_SETTLE_SECONDS = 600
    org = OrganizationFactory()
    fund(org, 1_000, key="first")
    fund(org, 2_000, key="second")
    first, second = Transfer.objects.get(key="first"), Transfer.objects.get(key="second")
    with connection.cursor() as cur:  # the second is old, the first (lower id) young: as if committed late
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute("UPDATE billing_transfer SET created_at = created_at - interval '1 hour' WHERE id = %s",
                    [second.pk])
        cur.execute("SET LOCAL session_replication_role = origin")
    assert ledger_verify(full=False) == []
    assert LedgerCheckpoint.objects.get().through_transfer_id < first.pk


def test_incremental_run_finds_a_tampered_balance_and_the_locked_run_confirms_it(settings):
    settings.VERIFY_SETTLE_SECONDS = 0
    org = OrganizationFactory()
    fund(org, 9_000)
    assert ledger_verify_locked() == []
    assert LedgerCheckpoint.objects.get().through_transfer_id == Transfer.objects.latest("pk").pk
    Account.objects.filter(organization=org, kind="cash").update(balance=9_001)
    incremental = ledger_verify(full=False)
    assert incremental == ledger_verify(full=True) == ledger_verify_locked()
    assert any("balance 9001 != recomputed 9000" in p for p in incremental)
    assert any("balances sum to 1" in p for p in incremental)
