"""Bus-bandwidth arithmetic shared by the parsers and the simulated driver."""

from __future__ import annotations


def allreduce_bus_factor(ranks: int) -> float:
    """busbw / algbw for all_reduce: 2(n−1)/n (nccl-tests doc/PERFORMANCE.md)."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    return 2.0 * (ranks - 1) / ranks


def allreduce_busbw(algbw_gbps: float, ranks: int) -> float:
    """Bus bandwidth of an all_reduce from its algorithm bandwidth."""
    return algbw_gbps * allreduce_bus_factor(ranks)


def allreduce_algbw(busbw_gbps: float, ranks: int) -> float:
    """Algorithm bandwidth that corresponds to a bus bandwidth (inverse of the above)."""
    factor = allreduce_bus_factor(ranks)
    return busbw_gbps / factor if factor else 0.0
