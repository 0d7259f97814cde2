"""What the agent sends about its cards' health with every heartbeat (`health_probe`): the raw outputs of the tools,
which the platform parses and classifies (hardware/health), so what a signal means changes without a new agent.

Each section is {"output": text (its tail, at most SECTION_LIMIT characters), "exit_code": int}.
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

from .constants import HEALTH_GPU_QUERY, HEALTH_REMAP_QUERY
from .programs import run

SECTION_LIMIT = 16 * 1024
XID_LINES = 50  # the newest Xid lines of the kernel log (the platform recognises lines it has seen)


def xid_lines(text: str) -> str:
    """The kernel log's NVRM Xid lines, the newest XID_LINES of them."""
    lines = [ln for ln in text.splitlines() if "NVRM: Xid" in ln]
    return "\n".join(lines[-XID_LINES:]) + ("\n" if lines else "")


def _section(text: str, code: int) -> dict:
    return {"output": text[-SECTION_LIMIT:], "exit_code": code}


class HealthProbe:
    """The Agent's health probe (it sets args)."""

    def kernel_log(self) -> tuple[str, int]:
        """The kernel ring buffer (dmesg), or this boot's kernel journal where dmesg is refused or missing."""
        text, code = run([self.args.dmesg], timeout=20)
        if code != 0 and shutil.which(self.args.journalctl):
            text, code = run([self.args.journalctl, "-k", "-b", "--no-pager", "-o", "short"], timeout=30)
        return text, code

    def kernel_xid(self) -> tuple[str, int]:
        """The kernel log's Xid lines (picked before the section is cut to its tail)."""
        text, code = self.kernel_log()
        return xid_lines(text), code

    def health_probe(self, vendor: str, npu_text: str = "", npu_code: int = 0) -> dict:
        if vendor == "huawei":  # npu-smi info was run for the devices already: its Health column is the probe
            return {"npu": _section(npu_text, npu_code)}
        smi = self.args.nvidia_smi
        calls = {
            "nvidia_gpu": lambda: run([smi, f"--query-gpu={HEALTH_GPU_QUERY}", "--format=csv,noheader,nounits"],
                                      timeout=30),
            "nvidia_remap": lambda: run([smi, f"--query-remapped-rows={HEALTH_REMAP_QUERY}",
                                         "--format=csv,noheader,nounits"], timeout=30),
            "nvlink": lambda: run([smi, "nvlink", "-s"], timeout=30),
            "kernel_xid": self.kernel_xid,
        }
        # At once: nvidia-smi takes up to seconds per call on a busy host, and the heartbeat waits for them all.
        with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="health") as pool:
            done = {name: pool.submit(call) for name, call in calls.items()}
        return {name: _section(*future.result()) for name, future in done.items()}
