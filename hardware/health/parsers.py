"""Pure parsers of the health outputs an agent sends with each heartbeat (`health_probe`), one per tool:

- `nvidia_gpu`: `nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits`
- `nvidia_remap`: `nvidia-smi --query-remapped-rows=<REMAP_QUERY> --format=csv,noheader,nounits` (the row-remapper
  fields are not --query-gpu fields: nvidia-smi refuses them there)
- `nvlink`: `nvidia-smi nvlink -s`
- `kernel_xid`: the kernel log's `NVRM: Xid` lines (dmesg or journalctl -k)
- `npu`: `npu-smi info`

Each section is {"output": text, "exit_code": int}. A line, a value or a whole output a parser cannot read becomes
an `unparsed` signal: never read as healthy.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from .classes import UNPARSED, classify

GPU_QUERY = ("index,pci.bus_id,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
             "retired_pages.pending,temperature.gpu,power.draw,clocks_throttle_reasons.active")
REMAP_QUERY = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
SECTIONS = ("nvidia_gpu", "nvidia_remap", "nvlink", "kernel_xid", "npu")
TEMPERATURE_HIGH_C = 85
# clocks_throttle_reasons.active bits (nvml.h nvmlClocksThrottleReason*): the ones that say something is wrong.
_HW_SLOWDOWN, _SW_THERMAL, _HW_THERMAL, _HW_POWER_BRAKE = 0x8, 0x20, 0x40, 0x80
_NOT_AVAILABLE = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]"}

# dmesg: "[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=…"; journalctl -k: "Dec 03 08:12:01 host kernel: NVRM: Xid …"
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): "
                  r"(?P<code>\d+),(?P<rest>.*)$")
_NVLINK_GPU = re.compile(r"^GPU (?P<index>\d+): .*$")
_NVLINK_LINK = re.compile(r"^\s*Link (?P<link>\d+): (?P<state>.+?)\s*$")
_NVLINK_NONE = re.compile(r"NVLink information as all links are inActive|No NVLinks? (?:found|supported)", re.I)
_NPU_ROW = re.compile(r"^\|\s*(?P<index>\d+)\s+(?P<name>[^\s|]+)\s*\|\s*(?P<health>[A-Za-z]+)\s*\|")
_NPU_HEALTH = {"ok": None, "warning": "npu_warning", "alarm": "npu_alarm", "critical": "npu_critical"}


@dataclass(frozen=True)
class Signal:
    """One thing a tool said about a card (`card`: its index; None when it names no card we know)."""

    kind: str
    card: int | None = None
    code: int | None = None
    detail: str = ""
    klass: str = field(default="")
    # What tells this signal from the same one seen again in the next heartbeat (an Xid line's own text, a count).
    key: str = ""

    def __post_init__(self):
        if not self.klass:
            object.__setattr__(self, "klass", classify(self.kind, self.code))

    @property
    def fingerprint(self) -> str:
        """Stable id of the signal for its card: a repeated report is recognised, a new one (a rising count,
        another Xid line) is not."""
        raw = f"{self.card}:{self.kind}:{self.code}:{self.key or self.detail}"
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _unparsed(section: str, text: str) -> Signal:
    return Signal(kind=UNPARSED, detail=f"{section}: {text.strip()[:300]}")


def bus_id(text: str) -> str:
    """A PCI address as nvidia-smi (`00000000:3B:00.0`) or the kernel (`0000:3b:00`) writes it → `0000:3b:00`."""
    parts = text.strip().lower().split(":")
    if len(parts) != 3:
        return text.strip().lower()
    domain, bus, device = parts
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{device.split('.')[0]}"


def _value(cell: str):
    """A query cell → int, float, bool (Yes/No), None (not available), or raises ValueError."""
    text = cell.strip()
    low = text.lower()
    if low in _NOT_AVAILABLE:
        return None
    if low in ("yes", "no"):
        return low == "yes"
    if low.startswith("0x"):
        return int(low, 16)
    number = float(text)
    return int(number) if number.is_integer() else number


def _flag(value) -> bool:
    """Yes / a positive count → True (remapped_rows.* print counts on some drivers, Yes/No on others)."""
    return bool(value) and value is not None


def parse_nvidia_gpu(text: str, exit_code: int = 0) -> tuple[list[Signal], dict]:
    """The health query's rows → (signals, {bus id: card index})."""
    if exit_code != 0:
        return [_unparsed("nvidia_gpu", f"exit {exit_code}: {text}")], {}
    signals, buses = [], {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(GPU_QUERY.split(",")) or not cells[0].isdigit():
            signals.append(_unparsed("nvidia_gpu", line))
            continue
        try:
            index, bus = int(cells[0]), bus_id(cells[1])
            dbe_volatile, dbe_aggregate, pending, temperature, _power, throttle = map(_value, cells[2:])
        except ValueError:
            signals.append(_unparsed("nvidia_gpu", line))
            continue
        buses[bus] = index
        if dbe_volatile:
            signals.append(Signal(kind="ecc_dbe_volatile", card=index, detail=f"{dbe_volatile} uncorrectable "
                                  "ECC error(s) since the driver loaded", key=str(dbe_volatile)))
        elif dbe_aggregate:
            signals.append(Signal(kind="ecc_dbe_aggregate", card=index, detail=f"{dbe_aggregate} uncorrectable "
                                  "ECC error(s) over the card's life", key=str(dbe_aggregate)))
        if pending is True:
            signals.append(Signal(kind="retired_pages_pending", card=index, detail="retired pages pending a reset"))
        if isinstance(temperature, (int, float)) and temperature >= TEMPERATURE_HIGH_C:
            signals.append(Signal(kind="temperature_high", card=index, detail=f"{temperature} °C",
                                  key=str(temperature)))
        if isinstance(throttle, int) and not isinstance(throttle, bool):
            signals += _throttle(index, throttle)
    if not buses and not signals:
        signals.append(_unparsed("nvidia_gpu", "no rows in the output"))
    return signals, buses


def _throttle(index: int, bits: int) -> list[Signal]:
    found = []
    if bits & _HW_POWER_BRAKE:
        found.append(Signal(kind="throttle_hw_power_brake", card=index, detail=f"clocks throttled: {bits:#x}"))
    elif bits & _HW_SLOWDOWN and not bits & _HW_THERMAL:
        found.append(Signal(kind="throttle_hw_slowdown", card=index, detail=f"clocks throttled: {bits:#x}"))
    if bits & (_HW_THERMAL | _SW_THERMAL):
        found.append(Signal(kind="throttle_thermal", card=index, detail=f"clocks throttled: {bits:#x}"))
    return found


def parse_nvidia_remap(text: str, exit_code: int, buses: dict) -> list[Signal]:
    """The row-remapper query's rows (keyed by bus id) → signals on the cards of `buses`."""
    if exit_code != 0:
        return [_unparsed("nvidia_remap", f"exit {exit_code}: {text}")]
    signals = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) != 3:
                raise ValueError
            pending, failure = _value(cells[1]), _value(cells[2])
        except ValueError:
            signals.append(_unparsed("nvidia_remap", line))
            continue
        card = buses.get(bus_id(cells[0]))
        if _flag(failure):
            signals.append(Signal(kind="row_remap_failure", card=card, detail="row remapping failed: no spare rows"))
        if _flag(pending):
            signals.append(Signal(kind="row_remap_pending", card=card, detail="remapped rows pending a reset"))
    return signals


def parse_nvlink(text: str, exit_code: int = 0) -> list[Signal]:
    """`nvidia-smi nvlink -s` → nvlink_down per card with a link down that is up on another card (a host whose
    cards have no active links at all has no NVLink: nothing to say)."""
    if exit_code != 0:
        return [_unparsed("nvlink", f"exit {exit_code}: {text}")]
    links: dict[int, dict[int, bool]] = {}
    signals, gpu = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _NVLINK_GPU.match(line.strip()):
            gpu = int(m["index"])
            links[gpu] = {}
        elif gpu is not None and (m := _NVLINK_LINK.match(line)):
            links[gpu][int(m["link"])] = "inactive" not in m["state"].lower()
        elif gpu is not None and _NVLINK_NONE.search(line):
            continue  # this card has no active link: judged against the others below
        else:
            signals.append(_unparsed("nvlink", line))
    used = {link for states in links.values() for link, up in states.items() if up}
    for index, states in sorted(links.items()):
        down = sorted(link for link in used if not states.get(link, False))
        if down:
            text_down = ",".join(map(str, down))
            signals.append(Signal(kind="nvlink_down", card=index, detail=f"NVLink(s) {text_down} inactive",
                                  key=text_down))
    return signals


def parse_kernel_xid(text: str, buses: dict) -> list[Signal]:
    """The kernel log's Xid lines → one signal each, on the card whose bus id the line names."""
    signals = []
    for line in text.splitlines():
        if "Xid" not in line:
            continue
        m = _XID.search(line)
        if m is None:
            signals.append(_unparsed("kernel_xid", line))
            continue
        rest = m["rest"].strip()
        message = rest.split(", ")[-1] if rest else ""
        signals.append(Signal(kind="xid", card=buses.get(bus_id(m["bus"])), code=int(m["code"]),
                              detail=f"Xid {m['code']} on {bus_id(m['bus'])}: {message}"[:300], key=line.strip()))
    return signals


def parse_npu_info(text: str, exit_code: int = 0) -> list[Signal]:
    """`npu-smi info` → a signal per NPU whose Health column is not OK."""
    if exit_code != 0:
        return [_unparsed("npu", f"exit {exit_code}: {text}")]
    signals, rows = [], 0
    for line in text.splitlines():
        m = _NPU_ROW.match(line.strip())
        if m is None:
            continue
        rows += 1
        health = m["health"].lower()
        if health not in _NPU_HEALTH:
            signals.append(_unparsed("npu", line))
        elif _NPU_HEALTH[health]:
            signals.append(Signal(kind=_NPU_HEALTH[health], card=int(m["index"]),
                                  detail=f"npu-smi health {m['health']}"))
    if not rows:
        signals.append(_unparsed("npu", "no NPU rows in the output"))
    return signals


def _section(probe: dict, name: str) -> tuple[str, int]:
    part = probe.get(name) or {}
    return str(part.get("output", "")), int(part.get("exit_code", 0) or 0)


def card_buses(probe: dict) -> dict:
    """{bus id: card index} of the cards the health query reached."""
    return parse_nvidia_gpu(*_section(probe, "nvidia_gpu"))[1] if "nvidia_gpu" in probe else {}


def parse_probe(probe: dict, known_buses: dict | None = None) -> list[Signal]:
    """Every signal of one heartbeat's `health_probe` (sections it lacks say nothing; an unknown one is unparsed).

    `known_buses`: the bus ids earlier heartbeats reported ({bus: index}); a card that fell off the bus is missing
    from this one's query, and its Xid line names it only by its bus."""
    def section(name):
        return _section(probe, name)

    signals = [_unparsed(name, "unknown section") for name in probe if name not in SECTIONS]
    buses: dict = dict(known_buses or {})
    if "nvidia_gpu" in probe:
        found, reached = parse_nvidia_gpu(*section("nvidia_gpu"))
        signals += found
        buses.update(reached)
    if "nvidia_remap" in probe:
        signals += parse_nvidia_remap(*section("nvidia_remap"), buses)
    if "nvlink" in probe:
        signals += parse_nvlink(*section("nvlink"))
    if "kernel_xid" in probe:
        signals += parse_kernel_xid(section("kernel_xid")[0], buses)
    if "npu" in probe:
        signals += parse_npu_info(*section("npu"))
    return signals
