"""cardmix-agent: the node agent of a Cardmix GPU/NPU host (Python standard library only).

It authenticates with the node token (`cmxn_…`), sends heartbeats with what it sees
(nvidia-smi / npu-smi), polls commands from /api/v1/agent/commands/ (under a lease it acknowledges before it starts one), runs
them and posts back what the node printed (text + exit code) — never a verdict; the platform parses and decides.
A journal in the state directory names the command running, so an agent restarted in the middle tells the
platform at once that it cannot say how it ended.

Runtimes: `docker` (containers with NVIDIA --gpus or Ascend /dev/davinci* devices) and `process`
(a local process stands in for the container: tests and demos).

A package (one module per part, none over 400 lines), shipped to a node as one file: `make agent` builds the
zipapp build/cardmix-agent.pyz, run as `python3 cardmix-agent.pyz …`. Standard library only.
The names below are what callers (the tests, `python3 -m cardmix_agent`) import from the package.
"""
from .agent import Agent
from .checks import disk_in_use
from .cli import main, parse_args
from .client import scrub
from .cluster import (
    CLUSTER_HOSTFILE,
    cluster_network_create_argv,
    cluster_of,
    cluster_run_args,
    rdma_run_args,
    resolve,
    vxlan_down_argv,
    vxlan_up_argv,
)
from .constants import (
    ASCEND_CONTROL_DEVICES,
    ASCEND_MOUNTS,
    COMMAND_ENV,
    DEFAULT_TOKEN_DIR,
    ENROLL_ARG,
    EXIT_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_RESTARTED,
    EXIT_TIMEOUT,
    INSTANCE_LABEL,
    KEYS_MARKER,
    NVIDIA_QUERY,
    ORIGINAL_KEYS_DIR,
    OUTPUT_GRACE_S,
    OUTPUT_HEAD,
    OUTPUT_TAIL,
    PORT_LABEL,
    TRANSIENT_ERRORS,
    VERSION,
)
from .enroll import enroll, enroll_secret_of, token_file_check
from .files import atomic_put, fsync_dir, make_private_dir
from .host import host_size, parse_npu_info, parse_nvidia_query
from .instances import container_of, ssh_port_of
from .journal import not_run_result, restarted_result
from .limits import CPU_PERIOD_US, cgroup2_root, cgroup_remove, cpus_text, limits_argv, limits_of
from .probe import PROBE
from .programs import OutputCapture, clip, process_identity, processes_of_command, run, stop_leftovers
from .runtime import RUNTIMES, DockerRuntime, ProcessRuntime, Runtime

__all__ = [
    "ASCEND_CONTROL_DEVICES", "ASCEND_MOUNTS", "CLUSTER_HOSTFILE", "COMMAND_ENV", "CPU_PERIOD_US", "DEFAULT_TOKEN_DIR",
    "ENROLL_ARG", "EXIT_CONFIG", "EXIT_NOT_FOUND", "EXIT_RESTARTED", "EXIT_TIMEOUT", "INSTANCE_LABEL", "KEYS_MARKER",
    "NVIDIA_QUERY", "ORIGINAL_KEYS_DIR", "OUTPUT_GRACE_S", "OUTPUT_HEAD", "OUTPUT_TAIL", "PORT_LABEL", "PROBE",
    "RUNTIMES", "TRANSIENT_ERRORS", "VERSION", "Agent", "DockerRuntime", "OutputCapture", "ProcessRuntime", "Runtime",
    "atomic_put", "cgroup2_root", "cgroup_remove", "clip", "cluster_network_create_argv", "cluster_of",
    "cluster_run_args", "container_of", "cpus_text", "disk_in_use", "enroll", "enroll_secret_of", "fsync_dir",
    "host_size", "limits_argv", "limits_of", "main", "make_private_dir", "not_run_result", "parse_args",
    "parse_npu_info", "parse_nvidia_query", "process_identity", "processes_of_command", "rdma_run_args", "resolve",
    "restarted_result", "run", "scrub", "ssh_port_of", "stop_leftovers", "token_file_check", "vxlan_down_argv",
    "vxlan_up_argv",
]
