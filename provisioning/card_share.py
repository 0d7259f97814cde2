"""A container's CPU and memory on a shared node: the node's cores and RAM × cards taken / cards on the node.

So one container cannot starve its neighbours: 2 of 8 cards on a 224-CPU, 2 TiB node get 56 CPUs and 512 GiB.
CPU is counted in thousandths of a CPU (millicpus, floored; docker `--cpus` and cgroup `cpu.max` both take
fractions of a CPU), memory in whole MiB (floored). A node whose cores or RAM are not known yet (no operator value,
no agent report) gives no limit rather than a guessed one. Plain Python: the quote, the agent driver and their
tests share it.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class CardShare:
    """What `cards` of a node's cards bring with them; None where the node's size is unknown."""

    millicpus: int | None
    memory_mib: int | None

    @property
    def cpus(self) -> float | None:
        """CPUs as a number (28, 13.5, 0.333): exact in thousandths."""
        return None if self.millicpus is None else self.millicpus / 1000

    @property
    def memory_gib(self) -> float | None:
        """GiB as a number, floored to a hundredth (the MiB value is the exact one)."""
        return None if self.memory_mib is None else (self.memory_mib * 100 // 1024) / 100

    def limits(self) -> dict:
        """The agent payload's `limits` (only what is known)."""
        return {k: v for k, v in (("millicpus", self.millicpus), ("memory_mib", self.memory_mib)) if v}


def card_share(*, cards: int, card_count: int, cpu_cores: int | None, memory_mib: int | None) -> CardShare:
    """floor(cores × 1000 × cards / card_count) millicpus and floor(RAM × cards / card_count) MiB."""
    if card_count <= 0 or cards <= 0:
        return CardShare(None, None)
    cards = min(cards, card_count)
    return CardShare(cpu_cores * 1000 * cards // card_count if cpu_cores else None,
                     memory_mib * cards // card_count if memory_mib else None)


def cpus_text(millicpus: int) -> str:
    """28000 → "28", 13500 → "13.5", 333 → "0.333" (docker's --cpus)."""
    return f"{millicpus // 1000}.{millicpus % 1000:03d}".rstrip("0").rstrip(".")
