"""Bandwidth model of the simulated fleet: large-message all_reduce busbw per accelerator."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class BandwidthModel:
    """busbw (GB/s) of an 8-card all_reduce at 8 GiB, with noise and a plausible clip range."""

    device_name: str  # as nvidia-smi / npu-smi name it
    mean_gbps: float
    sd_gbps: float
    low_gbps: float
    high_gbps: float
    # Fewer cards use fewer links; the factor at 2 / 4 cards (8 = 1.0). Assumption, see README.
    scale_by_cards: tuple[tuple[int, float], ...] = ((2, 0.85), (4, 0.93), (8, 1.0))

    def card_factor(self, cards: int) -> float:
        """Scale for a group of `cards` cards: the entry at the largest size ≤ cards."""
        factor = self.scale_by_cards[0][1]
        for n, f in self.scale_by_cards:
            if cards >= n:
                factor = f
        return factor

    def draw(self, rng: random.Random, cards: int) -> float:
        """One healthy run's busbw at the largest size."""
        value = min(self.high_gbps, max(self.low_gbps, rng.gauss(self.mean_gbps, self.sd_gbps)))
        return value * self.card_factor(cards)


# Ranges per SPEC §3 (H100 360–480, H800 200–215, A800 ~190–220, 910B ~150–200 at 8 cards).
MODELS: dict[str, BandwidthModel] = {
    "h100-sxm-80g": BandwidthModel("NVIDIA H100 80GB HBM3", 420.0, 25.0, 360.0, 480.0),
    "h800-sxm-80g": BandwidthModel("NVIDIA H800", 207.0, 3.5, 200.0, 215.0),
    "a800-sxm-80g": BandwidthModel("NVIDIA A800-SXM4-80GB", 205.0, 7.0, 190.0, 220.0),
    # HCCS full mesh: fewer NPUs use fewer links, so the drop is steeper than NVSwitch's.
    "ascend-910b": BandwidthModel(
        "910B", 175.0, 12.0, 150.0, 200.0, scale_by_cards=((2, 0.70), (4, 0.85), (8, 1.0))
    ),
}
FALLBACK = BandwidthModel("Unknown accelerator", 100.0, 5.0, 90.0, 110.0)

# A degraded link (NVLink down to PCIe, HCCS lane fault): a fraction of the healthy value,
# low enough to fall under every catalog floor.
LOW_BANDWIDTH_FACTOR: tuple[float, float] = (0.20, 0.45)


def model_for(accelerator: str) -> BandwidthModel:
    """The model of a catalog slug (unknown slugs get a modest generic one)."""
    return MODELS.get(accelerator, FALLBACK)


def fabric_gbps(fabric: str, default: float = 200.0) -> float:
    """Per-NIC line rate in Gbit/s from a fabric label such as "roce-200g" or "ib-400g"."""
    match = re.search(r"(\d+)\s*g", fabric or "", re.IGNORECASE)
    return float(match.group(1)) if match else default


def inter_node_busbw(rng: random.Random, fabric: str, nics_per_node: int, intra_gbps: float) -> float:
    """Multi-node busbw: the network (one NIC per card, ~85–92 % of line rate) or NVLink, whichever is lower."""
    network = fabric_gbps(fabric) / 8.0 * nics_per_node * rng.uniform(0.85, 0.92)
    return min(network, intra_gbps)
