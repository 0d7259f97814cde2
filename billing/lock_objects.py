"""Row locks for the ledger, always in pk order (platform accounts have negative ids, so they come first)."""
from django.db.models import Q, Subquery

from .models import Account, BillingProfile, Meter


def accounts_lock(ids) -> dict[int, Account]:
    """Lock these accounts FOR UPDATE in pk order; {id: Account}."""
    return {a.pk: a for a in Account.objects.filter(pk__any_array=sorted(set(ids))).order_by("pk").select_for_update()}


def org_accounts_lock(org_id, *, also=()) -> dict[int, Account]:
    """Lock the organization's accounts and the accounts `also` in pk order, in one statement; {id: Account}, each
    with the organization's `credit_limit` (None without a profile) read by the same statement."""
    limit = BillingProfile.objects.filter(pk=org_id).values("credit_limit")
    return {a.pk: a for a in Account.objects.filter(Q(organization_id=org_id) | Q(pk__any_array=sorted(set(also))))
            .annotate(credit_limit=Subquery(limit)).order_by("pk").select_for_update(of=("self",))}


def meters_lock_open(*, instance_id) -> list[Meter]:
    """Lock the instance's open meters in pk order."""
    return list(Meter.objects.filter(instance_id=instance_id, closed_at__isnull=True).order_by("pk").select_for_update())


def meter_lock(meter_id) -> Meter:
    """Lock one meter row."""
    return Meter.objects.select_for_update().get(pk=meter_id)


def profile_lock(org_id) -> BillingProfile:
    """Lock an organization's billing profile (created on first use)."""
    BillingProfile.objects.bulk_create([BillingProfile(organization_id=org_id)], ignore_conflicts=True)
    return BillingProfile.objects.select_for_update().get(pk=org_id)
