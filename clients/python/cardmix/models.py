"""Typed views of the API's bodies. Each class names the OpenAPI component it mirrors (`SCHEMA`);
tests/clients/test_sdk_schema.py fails when a field is added to or dropped from either side.

Money stays a decimal string with 6 decimals, as the API sends it (µCNY exact); times are ISO-8601 strings.
A field the server adds later lands in `extra` instead of breaking an older SDK.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass
class Model:
    SCHEMA: ClassVar[str] = ""
    extra: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: dict):
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {cls._py(k): v for k, v in data.items() if cls._py(k) in names}
        return cls(**known, extra={k: v for k, v in data.items() if cls._py(k) not in names})

    @classmethod
    def api_fields(cls) -> set[str]:
        """The JSON names of the fields (what the schema must list)."""
        return {cls._json(f.name) for f in fields(cls)} - {"extra"}

    @staticmethod
    def _py(name: str) -> str:
        return "from_state" if name == "from" else name

    @staticmethod
    def _json(name: str) -> str:
        return "from" if name == "from_state" else name

    def to_dict(self) -> dict:
        out = {self._json(f.name): getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**out, **self.extra}


@dataclass
class Accelerator(Model):
    SCHEMA: ClassVar[str] = "Accelerator"
    slug: str = ""
    name: str = ""
    vendor: str = ""
    domestic: bool = False
    memory_gb: int = 0
    collective: str = ""
    price_per_card_hour: str = "0.000000"
    monthly_price_per_card_hour: str | None = None
    orderable: bool = False
    available_cards: int = 0
    total_cards: int = 0


@dataclass
class Zone(Model):
    SCHEMA: ClassVar[str] = "Zone"
    slug: str = ""
    name: str = ""
    fabric_kind: str = ""
    fabric_gbps: float | None = None
    inter_node_floor_gbps: float | None = None
    stock: list = field(default_factory=list)


@dataclass
class Image(Model):
    SCHEMA: ClassVar[str] = "Image"
    slug: str = ""
    name: str = ""
    description: str = ""
    vendors: list = field(default_factory=list)
    http_ports: list = field(default_factory=list)  # [{"port", "name"}] reached at /proxy/<instance>/<port>/
    jupyter_port: int | None = None


@dataclass
class Quote(Model):
    SCHEMA: ClassVar[str] = "Quote"
    items: list = field(default_factory=list)
    price_per_hour: str = "0.000000"
    price_per_second: str = "0.000000000"
    available: bool = False
    domestic_share: float = 0.0
    missing: Any = None
    volumes: list = field(default_factory=list)
    datasets: list = field(default_factory=list)
    volumes_price_per_hour: str = "0.000000"
    total_price_per_hour: str = "0.000000"
    total_price_per_second: str = "0.000000000"


@dataclass
class Instance(Model):
    SCHEMA: ClassVar[str] = "Instance"
    id: str = ""
    name: str = ""
    kind: str = ""
    state: str = ""
    state_reason: str = ""
    items: list = field(default_factory=list)
    policy: dict | None = None
    zone: str | None = None
    nodes: list = field(default_factory=list)
    image: str | None = None
    images: dict = field(default_factory=dict)
    billing: str = ""
    package_renewal: str = ""
    package: dict | None = None
    waitlist: bool = False
    created_at: str = ""
    ready_at: str | None = None
    price_per_hour: str = "0.000000"
    price_per_second: str = "0.000000000"
    cost_so_far: str = "0.000000"
    ssh: list = field(default_factory=list)
    ssh_gateway: dict | None = None
    sla: dict = field(default_factory=dict)
    waitlist_position: int | None = None
    slurm_partition: dict | None = None
    actions: list = field(default_factory=list)
    notices: list = field(default_factory=list)
    volumes: list = field(default_factory=list)
    datasets: list = field(default_factory=list)

    @property
    def cards(self) -> int:
        return sum(int(it.get("count", 0)) for it in self.items)


@dataclass
class InstanceEvent(Model):
    SCHEMA: ClassVar[str] = "InstanceEvent"
    id: str = ""
    from_state: str | None = None
    to: str = ""
    reason: str = ""
    request_id: str | None = None
    actor: str | None = None
    at: str = ""


@dataclass
class ReadinessReport(Model):
    SCHEMA: ClassVar[str] = "ReadinessReport"
    node: str = ""
    nodes: list = field(default_factory=list)
    scope: str = ""
    tool: str = ""
    command: str = ""
    attempt: int = 0
    cards: list = field(default_factory=list)
    busbw_gbps: float | None = None
    busbw_peak_gbps: float | None = None
    floor_gbps: float | None = None
    passed: bool = False
    rows: Any = None
    errors: Any = None
    exit_code: int | None = None
    raw_output: str = ""
    topology: Any = None
    started_at: str | None = None
    finished_at: str | None = None


@dataclass
class Balance(Model):
    SCHEMA: ClassVar[str] = "Balance"
    cash: str = "0.000000"
    trial: str = "0.000000"
    compensation: str = "0.000000"
    grant: str = "0.000000"
    credit_limit: str = "0.000000"
    available: str = "0.000000"
    burn_rate_per_hour: str = "0.000000"
    exhausts_at: str | None = None
    low_balance_warning: bool = False


@dataclass
class UsageLine(Model):
    SCHEMA: ClassVar[str] = "UsageLine"
    meter_id: int = 0
    instance_id: str = ""
    item_index: int = 0
    accelerator: str = ""
    cards: int = 0
    rate: str = "0.000000"
    opened_at: str = ""
    closed_at: str | None = None
    seconds: int = 0
    amount: str = "0.000000"
    written_off: str = "0.000000"
    subject: str = "instance"


@dataclass
class SshKey(Model):
    SCHEMA: ClassVar[str] = "SshKey"
    id: str = ""
    name: str = ""
    public_key: str = ""
    fingerprint: str = ""
    key_type: str = ""
    created_at: str = ""


ALL_MODELS = [Accelerator, Zone, Image, Quote, Instance, InstanceEvent, ReadinessReport, Balance, UsageLine, SshKey]
