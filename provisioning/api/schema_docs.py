"""What the instance, quote, event and readiness bodies look like, for the OpenAPI schema only.

The bodies themselves are built as plain dicts on the fast path (rows.instance_body, serializers.quote_body…);
these serializers describe them so clients can type them (clients/python checks its models against the schema).
tests/provisioning/test_schema_docs.py fails when a body and its description part.
"""
from django.utils.translation import gettext_lazy
from rest_framework import serializers


class _Doc(serializers.Serializer):
    def to_representation(self, instance):  # never used to render
        raise NotImplementedError


def _paginated(doc: type) -> type:
    """The list envelope {count, next, previous, results} around `doc` (component "Paginated<name>")."""
    name = doc.Meta.ref_name
    meta = type("Meta", (), {"ref_name": f"Paginated{name}"})
    return type(f"Paginated{name}Doc", (_Doc,), {
        "Meta": meta, "count": serializers.IntegerField(allow_null=True, help_text="Rows in the list; null on cursor pages."),
        "next": serializers.CharField(allow_null=True),
        "previous": serializers.CharField(allow_null=True), "results": doc(many=True)})


class InstanceItemDoc(_Doc):
    class Meta:
        ref_name = "InstanceItem"

    accelerator = serializers.CharField()
    count = serializers.IntegerField()
    price_per_card_hour = serializers.CharField(help_text=gettext_lazy("CNY, 6 decimals"))


class InstanceNodeDoc(_Doc):
    class Meta:
        ref_name = "InstanceNode"

    node = serializers.CharField()
    item_index = serializers.IntegerField()
    accelerator = serializers.CharField()
    cards = serializers.ListField(child=serializers.IntegerField())
    state = serializers.CharField()


class SshEntryDoc(_Doc):
    class Meta:
        ref_name = "SshEntry"

    node = serializers.CharField()
    host = serializers.CharField()
    port = serializers.IntegerField(allow_null=True)
    user = serializers.CharField()
    command = serializers.CharField()


class SshGatewayDoc(_Doc):
    class Meta:
        ref_name = "SshGateway"

    host = serializers.CharField(help_text=gettext_lazy("the platform's SSH gateway, one address for every instance"))
    port = serializers.IntegerField()
    user = serializers.CharField(help_text=gettext_lazy("the instance's short id: `ssh <short id>@<gateway>`"))
    command = serializers.CharField(help_text=gettext_lazy("ssh through the gateway with a key registered on the platform"))
    jump = serializers.CharField(help_text=gettext_lazy("the same as a ProxyJump (`ssh -J`)"))
    config = serializers.CharField(help_text=gettext_lazy("a ready ~/.ssh/config block: `ssh <instance name>`"))


class SlaDoc(_Doc):
    class Meta:
        ref_name = "Sla"

    deadline = serializers.DateTimeField(allow_null=True)
    breached = serializers.BooleanField()
    compensation = serializers.CharField(allow_null=True)


class PackageDoc(_Doc):
    class Meta:
        ref_name = "Package"

    period = serializers.CharField()
    state = serializers.CharField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    renewal = serializers.CharField()


class InstanceDoc(_Doc):
    class Meta:
        ref_name = "Instance"

    id = serializers.UUIDField()
    name = serializers.CharField()
    kind = serializers.CharField()
    state = serializers.CharField()
    state_reason = serializers.CharField()
    items = InstanceItemDoc(many=True)
    policy = serializers.JSONField(allow_null=True)
    zone = serializers.CharField(allow_null=True)
    nodes = InstanceNodeDoc(many=True)
    image = serializers.CharField(allow_null=True)
    images = serializers.DictField(child=serializers.CharField())
    billing = serializers.CharField()
    package_renewal = serializers.CharField()
    package = PackageDoc(allow_null=True)
    waitlist = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    ready_at = serializers.DateTimeField(allow_null=True)
    price_per_hour = serializers.CharField()
    price_per_second = serializers.CharField()
    cost_so_far = serializers.CharField()
    ssh = SshEntryDoc(many=True, help_text=gettext_lazy("each node's sshd directly (node address and port)"))
    ssh_gateway = SshGatewayDoc(allow_null=True, help_text=gettext_lazy("the gateway form; null while there is no sshd to reach"))
    sla = SlaDoc()
    waitlist_position = serializers.IntegerField(allow_null=True)
    slurm_partition = serializers.JSONField(allow_null=True)
    actions = serializers.ListField(child=serializers.CharField())
    notices = serializers.ListField(child=serializers.JSONField())
    volumes = serializers.ListField(child=serializers.JSONField(), help_text=gettext_lazy("attached volumes and mount paths"))
    datasets = serializers.ListField(child=serializers.JSONField(), help_text=gettext_lazy("library entries mounted read-only"))


PaginatedInstanceDoc = _paginated(InstanceDoc)


class QuoteItemDoc(_Doc):
    class Meta:
        ref_name = "QuoteItem"

    accelerator = serializers.CharField()
    count = serializers.IntegerField()
    price_per_card_hour = serializers.CharField()
    cpus = serializers.FloatField(allow_null=True)
    memory_mib = serializers.IntegerField(allow_null=True)
    memory_gib = serializers.FloatField(allow_null=True)
    busbw_gbps = serializers.FloatField(
        allow_null=True, help_text=gettext_lazy("the lowest last measured readiness all_reduce busbw (GB/s) of the nodes chosen "
                                   "for it now; null when none was measured yet"))


class QuoteDoc(_Doc):
    class Meta:
        ref_name = "Quote"

    items = QuoteItemDoc(many=True)
    price_per_hour = serializers.CharField()
    price_per_second = serializers.CharField()
    available = serializers.BooleanField()
    domestic_share = serializers.FloatField()
    missing = serializers.JSONField()
    volumes = serializers.ListField(child=serializers.JSONField())
    datasets = serializers.ListField(child=serializers.JSONField())
    volumes_price_per_hour = serializers.CharField()
    total_price_per_hour = serializers.CharField()
    total_price_per_second = serializers.CharField()


class InstanceEventDoc(_Doc):
    class Meta:
        ref_name = "InstanceEvent"

    id = serializers.CharField()
    # "from" is a Python keyword: the field is declared below under its JSON name.
    to = serializers.CharField()
    reason = serializers.CharField()
    request_id = serializers.CharField(allow_null=True)
    actor = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()


InstanceEventDoc._declared_fields["from"] = serializers.CharField(allow_null=True)


PaginatedInstanceEventDoc = _paginated(InstanceEventDoc)


class ReadinessReportDoc(_Doc):
    class Meta:
        ref_name = "ReadinessReport"

    node = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())
    scope = serializers.CharField()
    tool = serializers.CharField()
    command = serializers.CharField()
    attempt = serializers.IntegerField()
    cards = serializers.ListField(child=serializers.IntegerField())
    busbw_gbps = serializers.FloatField(allow_null=True)
    busbw_peak_gbps = serializers.FloatField(allow_null=True)
    floor_gbps = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField()
    rows = serializers.JSONField()
    errors = serializers.JSONField()
    exit_code = serializers.IntegerField(allow_null=True)
    raw_output = serializers.CharField()
    topology = serializers.JSONField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


PaginatedReadinessReportDoc = _paginated(ReadinessReportDoc)
