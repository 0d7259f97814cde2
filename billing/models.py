"""The ledger (accounts, immutable transfers), meters, write-offs and per-organization billing profiles.

Sign convention: an account's `balance` = credits − debits, from the account's point of view.
A transfer debits one account and credits another, so customer accounts are positive while they
hold money, platform accounts (the other side) are mostly negative, and the sum of all balances
is always zero.
"""
from django.db import models
from django.db.models import F, Q

from core.money import format_ucny

from .choices import NON_NEGATIVE_KINDS, AccountKind, MeterSubject


class Account(models.Model):
    """One ledger account: an organization's cash/trial/compensation/grant, or a platform account."""

    # Platform accounts use fixed negative ids (choices.PLATFORM_IDS); organization accounts count up.
    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey("tenancy.Organization", null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="accounts")
    kind = models.CharField(max_length=20, choices=AccountKind.choices)
    # Materialised credits − debits; changes only together with its transfers, under the row lock.
    balance = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "kind"], name="account_unique_org_kind"),
            models.UniqueConstraint(fields=["kind"], condition=Q(organization__isnull=True),
                                    name="account_unique_platform_kind"),
            # TigerBeetle's debits_must_not_exceed_credits, for the credits a customer cannot overdraw.
            models.CheckConstraint(condition=~Q(kind__in=NON_NEGATIVE_KINDS) | Q(balance__gte=0),
                                   name="account_credit_non_negative"),
        ]

    def __str__(self):
        return f"{self.organization_id or 'platform'}:{self.kind}"


class Transfer(models.Model):
    """An immutable movement of `amount` µCNY from `debit_account` to `credit_account`."""

    id = models.BigAutoField(primary_key=True)
    # Idempotency key: the same key with the same fields returns this row; different fields are refused.
    key = models.CharField(max_length=200, unique=True)
    # Indexed by transfer_debit_idx / transfer_credit_idx (account, -id): a single-column index as well would
    # only cost every insert of the tick.
    debit_account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="debits", db_index=False)
    credit_account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="credits", db_index=False)
    amount = models.BigIntegerField()
    code = models.CharField(max_length=30)
    # References as plain ids (billing sits below provisioning and payments).
    meter_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    instance_id = models.UUIDField(null=True, blank=True, db_index=True)
    payment_ref = models.CharField(max_length=200, blank=True)
    grant_ref = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="transfer_amount_positive"),
            models.CheckConstraint(condition=~Q(debit_account=F("credit_account")), name="transfer_distinct_accounts"),
        ]
        indexes = [
            models.Index(fields=["debit_account", "-id"], name="transfer_debit_idx"),
            models.Index(fields=["credit_account", "-id"], name="transfer_credit_idx"),
        ]

    def __str__(self):
        return f"{self.key}: {format_ucny(self.amount)} CNY {self.debit_account_id}→{self.credit_account_id}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValueError("Transfers are immutable; post a correcting transfer instead.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Transfers are immutable; post a correcting transfer instead.")


class BillingProfile(models.Model):
    """Per-organization billing settings and state: postpaid credit limit, trial deadline, warnings."""

    organization = models.OneToOneField("tenancy.Organization", primary_key=True, on_delete=models.CASCADE,
                                        related_name="billing_profile")
    # Postpaid: cash may go down to −credit_limit (µCNY). 0 = prepaid.
    credit_limit = models.BigIntegerField(default=0)
    trial_expires_at = models.DateTimeField(null=True, blank=True)
    trial_expired_at = models.DateTimeField(null=True, blank=True)
    # Set when the one-hour-of-burn warning went out (email + console banner); cleared when funds recover.
    low_balance_warned_at = models.DateTimeField(null=True, blank=True)
    # Set when auto-stop was requested because funds ran out; cleared when funds recover.
    autostop_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(credit_limit__gte=0), name="profile_credit_limit_gte0")]
        indexes = [models.Index(fields=["trial_expires_at"], condition=Q(trial_expired_at__isnull=True),
                                name="profile_trial_due_idx"),
                   # The few flagged profiles, for every tick's watch.funds_flags_clear_idle (its WHERE is this
                   # predicate): without it that UPDATE scans every organization's profile each tick.
                   models.Index(fields=["organization"], name="profile_flagged_idx",
                                condition=Q(low_balance_warned_at__isnull=False)
                                | Q(autostop_requested_at__isnull=False))]

    def __str__(self):
        return f"billing profile of {self.organization_id}"


class Meter(models.Model):
    """Per-second usage of one instance item while it runs (SPEC §4 Charging)."""

    id = models.BigAutoField(primary_key=True)
    # Indexed by meter_org_opened_idx (organization, -opened_at), which every tick's meter update maintains.
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="meters",
                                     db_index=False)
    instance_id = models.UUIDField(db_index=True)  # plain id: provisioning sits above billing
    # What is metered: an instance item, or a storage volume (then instance_id holds the volume's id and `cards`
    # its size in GiB, `rate` µCNY per GiB-hour). Funds running out caps instance meters only: volumes are kept.
    subject = models.CharField(max_length=10, choices=MeterSubject.choices, default=MeterSubject.INSTANCE)
    item_index = models.PositiveIntegerField()
    accelerator = models.CharField(max_length=40)  # accelerator slug
    cards = models.PositiveIntegerField()
    rate = models.BigIntegerField()  # µCNY per card-hour, locked when the meter opened
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    # Whole seconds since opened_at accounted for so far, and what they cost: posted (transferred)
    # plus written off always equals floor(rate × cards × posted_through_seconds / 3600).
    posted_through_seconds = models.BigIntegerField(default=0)
    posted_amount = models.BigIntegerField(default=0)
    written_off_amount = models.BigIntegerField(default=0)
    # Auto-stop: seconds after this one are not billed (funds ran out); they become write-offs.
    billable_until_seconds = models.BigIntegerField(null=True, blank=True)
    # µCNY given back (code node_dark) for seconds ticks charged past the second it was closed at: its node stopped
    # heartbeating before the platform noticed (metering.meters_pause). What it cost = posted − credited.
    credited_amount = models.BigIntegerField(default=0)
    # What the statement says about this meter's time besides its charge: a card that failed (the meter closed and
    # the rest went on in a new one) or ran degraded (charged, flagged). Plain text, one line each.
    flags = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["instance_id", "item_index"], condition=Q(closed_at__isnull=True),
                                    name="meter_one_open_per_item"),
            models.CheckConstraint(condition=Q(cards__gt=0) & Q(rate__gte=0), name="meter_cards_rate_valid"),
            models.CheckConstraint(condition=Q(posted_amount__gte=0) & Q(written_off_amount__gte=0)
                                   & Q(posted_through_seconds__gte=0), name="meter_counters_non_negative"),
            models.CheckConstraint(condition=Q(credited_amount__gte=0) & Q(credited_amount__lte=F("posted_amount")),
                                   name="meter_credited_within_posted"),
        ]
        indexes = [
            # Also the order the tick walks the open meters in, a chunk at a time (organization, then id): each
            # organization's accounts are locked by one chunk, rarely two, and closed meters are never stepped over.
            models.Index(fields=["organization", "id"], condition=Q(closed_at__isnull=True),
                         name="meter_open_org_id_idx"),
            models.Index(fields=["organization", "-opened_at"], name="meter_org_opened_idx"),
        ]

    def __str__(self):
        return f"meter {self.pk} ({self.instance_id}#{self.item_index})"


class MeterCharge(models.Model):
    """What one posting of a meter charged (µCNY, all its sources together) and the whole second it posted through.

    The per-meter detail of the ledger: a tick posts one transfer per organization and source account (key
    `tick:<first meter>:<its second>:<source>`, unique as that meter's posting is; no meter or instance), so what
    each meter was charged, and when, lives here (a close's own per-meter transfers get a row too). Per-meter readers (usage, statements, the ledger's
    drill-down) read these rows; balances and the ledger's sums read the transfers. verify_ledger checks that each
    organization's metered transfers sum to its rows and each meter's rows to its posted_amount. Narrow on purpose:
    one index (the key), no foreign keys, so the tick's 100k rows cost a fraction of 100k transfers."""

    pk = models.CompositePrimaryKey("meter_id", "through_seconds")
    meter_id = models.BigIntegerField()  # plain id: no foreign-key check on every insert of the tick
    through_seconds = models.BigIntegerField()  # the posting's through-second (its key: meter:<id>:<second>)
    amount = models.BigIntegerField()
    created_at = models.DateTimeField()  # the transfers' created_at (the same statement's clock)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(amount__gt=0), name="metercharge_amount_positive")]

    def __str__(self):
        return f"meter {self.meter_id} through {self.through_seconds} s: {format_ucny(self.amount)} CNY"


class WriteOff(models.Model):
    """Seconds that could not be charged (funds ran out or past the auto-stop second); no transfer."""

    id = models.BigAutoField(primary_key=True)
    meter = models.ForeignKey(Meter, on_delete=models.PROTECT, related_name="write_offs")
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.PROTECT, related_name="write_offs")
    key = models.CharField(max_length=200, unique=True)  # the meter posting key
    seconds = models.BigIntegerField()
    amount = models.BigIntegerField()
    reviewed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.CheckConstraint(condition=Q(amount__gt=0) & Q(seconds__gte=0),
                                              name="writeoff_positive")]

    def __str__(self):
        return f"write-off {format_ucny(self.amount)} CNY ({self.seconds} s) on meter {self.meter_id}"


class LedgerCheckpoint(models.Model):
    """How far incremental ledger verification has summed the transfers (one row, id 1): every transfer with
    id <= through_transfer_id is in the AccountCheckpoint totals."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    through_transfer_id = models.BigIntegerField(default=0)
    verified_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"ledger verified through transfer {self.through_transfer_id}"


class AccountCheckpoint(models.Model):
    """An account's credits − debits over the transfers up to LedgerCheckpoint.through_transfer_id."""

    account = models.OneToOneField(Account, primary_key=True, on_delete=models.CASCADE, related_name="checkpoint")
    total = models.BigIntegerField(default=0)

    def __str__(self):
        return f"checkpoint of account {self.account_id}: {self.total}"


from .models_fapiao import *  # noqa: E402,F401,F403  (fapiao)
from .models_payments import *  # noqa: E402,F401,F403  (payments)
from .models_products import *  # noqa: E402,F401,F403  (products)
