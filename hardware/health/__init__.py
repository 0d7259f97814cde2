"""Health while running: the agent's raw tool outputs (nvidia-smi queries, `nvidia-smi nvlink -s`, the kernel log's
Xid lines, `npu-smi info`) parsed into signals (`parsers`), each given a class by one table (`classes`).

Both modules import nothing from Django, so the corpus in tests/hardware/health_corpus/ is checked on its own.
"""
from .classes import DEGRADED, FAILED, INFO, UNPARSED, classify, worst
from .parsers import Signal, parse_probe

__all__ = ["DEGRADED", "FAILED", "INFO", "UNPARSED", "Signal", "classify", "parse_probe", "worst"]
