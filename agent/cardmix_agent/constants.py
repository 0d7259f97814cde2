"""What every part of the agent shares: its version, exit codes, labels, the logger."""
from __future__ import annotations

import http.client
import logging
import urllib.error

VERSION = "1.7.0"
OUTPUT_HEAD = OUTPUT_TAIL = 128 * 1024  # upload at most 256 KiB per command: the head and the tail
NVIDIA_QUERY = "index,name,uuid,memory.total,driver_version,temperature.gpu,utilization.gpu"
# Health while running (agents from 1.6.0; the platform's hardware/health/parsers.py reads these columns). The
# row-remapper's fields are not --query-gpu fields: nvidia-smi has them under --query-remapped-rows.
HEALTH_GPU_QUERY = ("index,pci.bus_id,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
                    "retired_pages.pending,temperature.gpu,power.draw,clocks_throttle_reasons.active")
HEALTH_REMAP_QUERY = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
# Ascend device nodes every NPU container needs besides its /dev/davinciN cards.
ASCEND_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# Driver files the Ascend runtime expects inside the container (read-only bind mounts, when present).
ASCEND_MOUNTS = ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi",
                 "/etc/ascend_install.info", "/usr/local/Ascend/add-ons")
EXIT_TIMEOUT = 124
EXIT_NOT_FOUND = 127
EXIT_RESTARTED = 75  # EX_TEMPFAIL: the agent restarted while the command ran (how it ended is unknown), or
# did not run one whose start the platform may have recorded
# Each program a command runs carries the command's id in its environment (inherited by whatever it starts), so an
# agent restarted after dying mid-command finds what that command left running (in sessions of their own, they
# outlive the agent) and stops it: a readiness test's all_reduce_perf must not hold the cards into the next one.
COMMAND_ENV = "CARDMIX_AGENT_COMMAND"
# After a program ends (or is killed): how long to wait for the rest of its output. A helper that left its
# process group (setsid, a daemon) may hold the pipe open for ever; waiting for its EOF would hang the agent.
OUTPUT_GRACE_S = 2.0
# What a failed request to the platform raises: the network, TLS, a malformed HTTP answer, a bad JSON body.
TRANSIENT_ERRORS = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)
# Every agent-started container carries it, so a wipe finds them all, even one the state dir forgot.
INSTANCE_LABEL = "cardmix.instance"
# The node port a container publishes its sshd on: a prepare finds an earlier container still holding it.
PORT_LABEL = "cardmix.ssh_port"
# Bare metal: the operator's own authorized_keys, kept in the state dir while a tenant's keys are in its place,
# and the mark a bare-metal instance's state dir gets when this agent saved it (an older agent's did not).
ORIGINAL_KEYS_DIR = "original-authorized-keys"
KEYS_MARKER = "keys-target"
# Bare metal: the deploy boot's kernel command line carries a one-time enrollment secret (`cardmix.enroll=cmxe_…`,
# put there by the platform through the BMC / boot server) that a freshly imaged node trades for its node token.
ENROLL_ARG = "cardmix.enroll="
DEFAULT_TOKEN_DIR = "/etc/cardmix-agent"
EXIT_CONFIG = 78

log = logging.getLogger("cardmix-agent")
