"""The one table that says what each health signal means: `info` (logged), `degraded` (the customer is warned and
the card is not placed again after release), `failed` (the card is taken out at once and its time is not charged).

`unparsed` is not a class of the card: output the parsers could not read is logged as such and never counts as
healthy (the node's report shows it), but it does not fail a card nobody has seen fail.
"""
from __future__ import annotations

INFO, DEGRADED, FAILED, UNPARSED = "info", "degraded", "failed", "unparsed"
_RANK = {INFO: 0, UNPARSED: 0, DEGRADED: 1, FAILED: 2}

# NVIDIA Xid codes (the driver's error catalogue, "Xid Errors" in NVIDIA's GPU deployment guide).
XID_CLASSES = {
    # 13 Graphics Engine Exception, 31 GPU memory page fault, 43 GPU stopped processing: what a faulty program
    # (an illegal address, a bad kernel) causes; the card is fine for the next program.
    13: INFO, 31: INFO, 43: INFO,
    # 48 double-bit ECC error: the driver retires the page, but the card needs a reset before the row is out of use.
    48: DEGRADED,
    # 63 a page retirement / row remap was recorded, 64 recording it failed: the memory is wearing; it keeps
    # working until a reset applies the remap (64: a retirement may be lost, yet the card still answers).
    63: DEGRADED, 64: DEGRADED,
    # 92 high single-bit ECC rate: corrected, but a precursor of uncorrectable errors.
    92: DEGRADED,
    # 94 contained ECC error: only the program that touched the row was stopped; the card needs a reset.
    94: DEGRADED,
    # 74 NVLink error: the fabric between cards is broken, collectives hang or fail.
    74: FAILED,
    # 79 GPU has fallen off the bus: the card is gone from the host until it is power-cycled.
    79: FAILED,
    # 95 uncontained ECC error: every program on the card may have read corrupt memory; reset needed at once.
    95: FAILED,
}
# Other codes are logged as info: an unknown code is no grounds to take a paying customer's card away.
XID_DEFAULT = INFO

SIGNAL_CLASSES = {
    # Uncorrectable (double-bit) ECC errors since the driver loaded: data on the card was corrupted.
    "ecc_dbe_volatile": FAILED,
    # Uncorrectable errors over the card's life but none since the last reset: retirement/remapping handled them.
    "ecc_dbe_aggregate": INFO,
    # A retired page or a remapped row waits for a reset to take effect: the bad memory is still in use.
    "retired_pages_pending": DEGRADED,
    "row_remap_pending": DEGRADED,
    # No spare rows left to remap into: the next error cannot be contained.
    "row_remap_failure": FAILED,
    # A link between cards down while its neighbours are up: collectives fall back to PCIe or fail.
    "nvlink_down": DEGRADED,
    # Hardware slowdown / power brake: the card runs far below its clocks (failed fan, PSU, sensor).
    "throttle_hw_slowdown": DEGRADED,
    "throttle_hw_power_brake": DEGRADED,
    # Thermal slowdowns and a hot card are worth a line in the log, not a customer's warning.
    "throttle_thermal": INFO,
    "temperature_high": INFO,
    # npu-smi's health column: Warning is its minor alarm, Alarm a major one (the card works, degraded),
    # Critical a critical one (the card cannot be trusted).
    "npu_warning": INFO,
    "npu_alarm": DEGRADED,
    "npu_critical": FAILED,
}


def classify(kind: str, code: int | None = None) -> str:
    """The class of one signal (`kind`, and the Xid `code` for kind "xid")."""
    if kind == "xid":
        return XID_CLASSES.get(code, XID_DEFAULT)
    if kind == UNPARSED:
        return UNPARSED
    return SIGNAL_CLASSES[kind]


def worst(classes) -> str | None:
    """The most severe class among `classes` (None for none)."""
    classes = list(classes)
    return max(classes, key=_RANK.__getitem__) if classes else None


def rank(klass: str | None) -> int:
    return _RANK.get(klass, -1)
