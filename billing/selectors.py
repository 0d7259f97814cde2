"""Reads for billing: balances, ledger lines, usage and costs, always scoped to one organization."""
import uuid

from django.db.models import Sum

from .models import Meter


def instance_costs(instance_ids) -> dict:
    """µCNY charged so far per instance id (posted amounts of its meters), in one query; keys as given."""
    given = {uuid.UUID(str(i)): i for i in instance_ids}
    rows = (Meter.objects.filter(instance_id__in=list(given)).values("instance_id")
            .annotate(total=Sum("posted_amount")).values_list("instance_id", "total"))
    costs = {i: 0 for i in given.values()}
    costs.update({given[i]: int(t or 0) for i, t in rows})
    return costs


def balance_summary(*, org) -> dict:
    """The balance endpoint's numbers: per-kind balances, credit limit, available, burn rate, exhaustion."""
    from core.dbclock import db_now

    from .funds import available_from, balances_of, burn_rate_per_hour, exhaustion
    from .models import BillingProfile

    balances = balances_of(org)
    available = available_from(balances)
    burn = burn_rate_per_hour(org)
    warned_at = BillingProfile.objects.filter(pk=org.pk).values_list("low_balance_warned_at", flat=True).first()
    return {**balances, "available": available, "burn_rate_per_hour": burn,
            "exhausts_at": exhaustion(available=available, burn_per_hour=burn, now=db_now()),
            "low_balance_warning": warned_at is not None}


def low_balance_warning(*, org) -> bool:
    """Whether the console shows the low-balance banner for this organization."""
    from .models import BillingProfile

    return BillingProfile.objects.filter(pk=org.pk, low_balance_warned_at__isnull=False).exists()


def transfer_list(*, org):
    """The organization's ledger lines, newest first, with both accounts joined (constant queries)."""
    from django.db.models import Q

    from .models import Account, Transfer

    ids = list(Account.objects.filter(organization=org).values_list("pk", flat=True))
    return (Transfer.objects.filter(Q(debit_account_id__in=ids) | Q(credit_account_id__in=ids))
            .select_related("debit_account", "credit_account").order_by("-id"))


def usage_list(*, org, start, end):
    """Meters of the organization that ran in [start, end), newest first, with what their transfers in
    that window charged (`window_amount`) and write-offs (`window_written_off`)."""
    from django.db.models import OuterRef, Q, Subquery, Value
    from django.db.models.functions import Coalesce

    from .models import Transfer, WriteOff

    charged = (Transfer.objects.filter(meter_id=OuterRef("pk"), created_at__gte=start, created_at__lt=end)
               .values("meter_id").annotate(s=Sum("amount")).values("s"))
    written = (WriteOff.objects.filter(meter_id=OuterRef("pk"), created_at__gte=start, created_at__lt=end)
               .values("meter_id").annotate(s=Sum("amount")).values("s"))
    return (Meter.objects.filter(organization=org, opened_at__lt=end)
            .filter(Q(closed_at__isnull=True) | Q(closed_at__gt=start))
            .annotate(window_amount=Coalesce(Subquery(charged), Value(0)),
                      window_written_off=Coalesce(Subquery(written), Value(0)))
            .order_by("-opened_at", "-pk"))


def instance_cost_expression(instance_id_ref):
    """instance_costs as an expression for one instance id (e.g. OuterRef("pk")): a list can read the µCNY
    charged so far with its own rows, in the same statement (0 when the instance has no meter)."""
    from django.db.models import BigIntegerField, Subquery, Value
    from django.db.models.functions import Coalesce

    total = (Meter.objects.filter(instance_id=instance_id_ref).order_by().values("instance_id")
             .annotate(total=Sum("posted_amount")).values("total"))
    return Coalesce(Subquery(total, output_field=BigIntegerField()), Value(0), output_field=BigIntegerField())
