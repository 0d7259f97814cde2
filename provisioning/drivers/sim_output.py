"""Text the simulated fleet prints, in the formats of the real tools."""

from __future__ import annotations

import random
from collections.abc import Sequence

from provisioning.readiness.bandwidth import allreduce_algbw

GIB8 = 8 * 1024**3


def _time_field(us: float) -> str:
    # nccl-tests prints times with fewer decimals as they grow (7 chars wide).
    if us >= 10000:
        return f"{us:7.0f}"
    if us >= 100:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def nccl_row(size: int, algbw: float, busbw: float, wrong: tuple[int, int], rng: random.Random) -> str:
    """One 13-field data row of the 2.13+ layout (float sum, root -1)."""
    halves = []
    for w in wrong:
        jitter = rng.uniform(0.995, 1.005)
        alg, bus = algbw * jitter, busbw * jitter
        time_us = size / (alg * 1e9) * 1e6 if alg > 0 else 0.0
        halves.append(f"  {_time_field(time_us)}  {alg:6.2f}  {bus:6.2f}  {w:5d}")
    return f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}" + "".join(halves)


def nccl_header(
    hosts: Sequence[tuple[str, Sequence[int]]],
    device_name: str,
    size: int,
    n_gpus_per_thread: int,
    rng: random.Random,
) -> list[str]:
    """Header lines: parameters, one "#  Rank" line per device, column titles."""
    lines = [
        "# Collective test starting: all_reduce_perf",
        f"# nThread 1 nGpus {n_gpus_per_thread} minBytes {size} maxBytes {size} step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    rank = 0
    for host, cards in hosts:
        pid = rng.randint(1000, 99999)
        for local, card in enumerate(cards):
            bus = 0x18 + 0x10 * card
            lines.append(
                f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {local:2d} "
                f"[0000:{bus:02x}:00] {device_name}"
            )
            rank += 1
    lines += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    return lines


def nccl_footer(out_of_bounds: int, avg_busbw: float) -> list[str]:
    """Footer lines of a completed run."""
    return [
        f"# Out of bounds values : {out_of_bounds} {'FAILED' if out_of_bounds else 'OK'}",
        f"# Avg bus bandwidth    : {avg_busbw:g} ",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
    ]


def hccl_header() -> str:
    """Column titles as the hccl_test binary prints them ("aveg_time" is its spelling)."""
    return "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:"


def hccl_row(size: int, busbw: float, ranks: int, check: str) -> str:
    """One hccl_test row; the tool prints algorithm bandwidth only."""
    alg = allreduce_algbw(busbw, ranks)
    time_us = size / (alg * 1e9) * 1e6 if alg > 0 else 0.0
    return f"{size:<18d}| {time_us:<15.2f}| {alg:<21.5f}| {check}"


def nvidia_topology(n: int, nics: int = 8, link: str = "NV18") -> str:
    """`nvidia-smi topo -m` matrix: every GPU pair over NVSwitch (NV18 = 18 NVLink 4 links)."""
    names = [f"GPU{i}" for i in range(n)] + [f"NIC{i}" for i in range(nics)]
    header = "\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [header]
    half = max(1, n // 2)
    for i in range(n):
        cells = ["X" if i == j else link for j in range(n)]
        cells += ["PIX" if j == i else ("NODE" if (j < half) == (i < half) else "SYS") for j in range(nics)]
        cpus, numa = ("0-55,112-167", 0) if i < half else ("56-111,168-223", 1)
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpus}\t{numa}\t\tN/A")
    for k in range(nics):
        cells = ["PIX" if j == k else ("NODE" if (j < half) == (k < half) else "SYS") for j in range(n)]
        cells += ["X" if j == k else ("NODE" if (j < half) == (k < half) else "SYS") for j in range(nics)]
        rows.append(f"NIC{k}\t" + "\t".join(cells))
    legend = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:
""" + "\n".join(f"  NIC{k}: mlx5_{k}" for k in range(nics))
    return "\n".join(rows) + "\n" + legend + "\n"


def ascend_topology(n: int) -> str:
    """`npu-smi info -t topo` matrix: 910B NPUs in an HCCS full mesh."""
    header = "           " + "".join(f"{'NPU' + str(i):<11}" for i in range(n)) + "CPU Affinity"
    rows = [header]
    for i in range(n):
        cells = "".join(f"{'X' if i == j else 'HCCS':<11}" for j in range(n))
        rows.append(f"{'NPU' + str(i):<11}{cells}{'0-23' if i < n // 2 else '24-47'}")
    legend = """
Legend:

  X    = Self
  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.
  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.
  PIX  = Path traversing a single PCIe switch
  PXB  = Path traversing multipul PCIe switches
  HCCS = Connection traversing HCCS.
  NA   = Unknown relationship.
"""
    return "\n".join(rows) + "\n" + legend


def nvidia_health(card: int, device_name: str, *, uncorrectable: int = 0, pending: bool = False) -> str:
    """`nvidia-smi -q -i <card> -d ECC,ROW_REMAPPER` for one GPU."""
    return f"""
==============NVSMI LOG==============

Timestamp                                 : Sun Nov 29 15:00:00 2026
Driver Version                            : 550.90.07
CUDA Version                              : 12.4

Attached GPUs                             : 8
GPU 00000000:{0x18 + 0x10 * card:02X}:00.0
    Product Name                          : {device_name}
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : {uncorrectable}
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : {"Yes" if pending else "No"}
        Remapping Failure Occurred        : No
"""


def ascend_health(card: int, status: str = "OK") -> str:
    """`npu-smi info -t health -i <card>` for one NPU."""
    return f"""        Health Status                  : {status}
        Error Code                     : {"NA" if status == "OK" else "80E01801"}
        Error Information              : {"NA" if status == "OK" else "HBM multi-bit ECC error"}
"""
