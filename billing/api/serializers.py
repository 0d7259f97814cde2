"""Billing API serializers: money as 6-decimal strings (core.fields.MoneyField)."""
from datetime import UTC, datetime

from django.utils.translation import gettext, gettext_lazy
from rest_framework import serializers

from core.fields import MoneyField

from ..rating import whole_seconds


class BalanceSerializer(serializers.Serializer):
    cash = MoneyField(allow_negative=True)
    trial = MoneyField()
    compensation = MoneyField()
    grant = MoneyField()
    credit_limit = MoneyField()
    available = MoneyField(allow_negative=True)
    burn_rate_per_hour = MoneyField()
    exhausts_at = serializers.DateTimeField(allow_null=True)
    low_balance_warning = serializers.BooleanField()


class TransferLineSerializer(serializers.Serializer):
    """A ledger line seen from the organization: positive amount, debit/credit, which of its accounts."""

    id = serializers.IntegerField()
    amount = MoneyField()
    direction = serializers.SerializerMethodField()
    account = serializers.SerializerMethodField()
    code = serializers.CharField()
    key = serializers.CharField()
    meter_id = serializers.IntegerField(allow_null=True)
    instance_id = serializers.UUIDField(allow_null=True)
    payment_ref = serializers.CharField()
    grant_ref = serializers.CharField()
    created_at = serializers.DateTimeField()

    def _credited(self, obj) -> bool:
        return obj.credit_account.organization_id == self.context["org"].pk

    def get_direction(self, obj) -> str:
        return "credit" if self._credited(obj) else "debit"

    def get_account(self, obj) -> str:
        return (obj.credit_account if self._credited(obj) else obj.debit_account).kind


# The window's sane range: nothing was billed before 2000, and `to` − 30 days (the default `from`) or a
# far-future bound must stay inside what datetime and PostgreSQL represent.
WINDOW_MIN = datetime(2000, 1, 1, tzinfo=UTC)
WINDOW_MAX = datetime(9000, 1, 1, tzinfo=UTC)


def _in_window_range(value):
    if not WINDOW_MIN <= value <= WINDOW_MAX:
        raise serializers.ValidationError(gettext('Must be between %(WINDOW_MIN)s and %(WINDOW_MAX)s.') % {'WINDOW_MIN': format(WINDOW_MIN, '%Y-%m-%d'), 'WINDOW_MAX': format(WINDOW_MAX, '%Y-%m-%d')})


class UsageQuerySerializer(serializers.Serializer):
    """`?from=&to=` (ISO-8601, years 2000–9000); default: the last 30 days up to now."""

    locals()["from"] = serializers.DateTimeField(required=False, validators=[_in_window_range])  # a keyword
    to = serializers.DateTimeField(required=False, validators=[_in_window_range])

    def validate(self, attrs):
        if attrs.get("from") and attrs.get("to") and attrs["from"] >= attrs["to"]:
            raise serializers.ValidationError({"from": [gettext("`from` must be before `to`.")]})
        return attrs


class UsageLineSerializer(serializers.Serializer):
    """One meter's usage within the window."""

    meter_id = serializers.IntegerField(source="pk")
    subject = serializers.CharField(help_text=gettext_lazy(
        '"instance", or "volume" / "image" (a saved image): then instance_id is the volume\'s or image\'s id, '
        'cards its size in GiB and rate per GiB-hour'))
    instance_id = serializers.UUIDField()
    item_index = serializers.IntegerField()
    accelerator = serializers.CharField()
    cards = serializers.IntegerField()
    rate = MoneyField(help_text=gettext_lazy("µCNY per card-hour, as CNY"))
    opened_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    seconds = serializers.SerializerMethodField()
    amount = MoneyField(source="window_amount")
    written_off = MoneyField(source="window_written_off")

    def get_seconds(self, obj) -> int:
        """Running seconds of this meter inside the window."""
        start, end, now = self.context["start"], self.context["end"], self.context["now"]
        begin = max(obj.opened_at, start)
        finish = min(obj.closed_at or now, end)
        return whole_seconds(begin, finish) if finish > begin else 0
