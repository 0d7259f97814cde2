"""Hardware: node agents, Redfish BMCs, bare-metal enrollment and cleaning, Slurm partitions, unreachable nodes."""
from django.core.exceptions import ImproperlyConfigured

from core.settings_registry import section, setting

section("Hardware", "Node agents, Redfish BMCs, bare-metal cleaning, Slurm partitions, and what happens to the "
        "instances of a node that went dark (see [unreachable nodes](node-health.md#unreachable-nodes)).")

# --- Node agents ----------------------------------------------------------------------------------------------------
# Agents are told to beat every AGENT_HEARTBEAT_SECONDS; no beat for AGENT_HEARTBEAT_TIMEOUT_SECONDS → unreachable.
AGENT_HEARTBEAT_SECONDS = setting("AGENT_HEARTBEAT_SECONDS", "float", 15.0, "agents are told to beat this often")
AGENT_HEARTBEAT_TIMEOUT_SECONDS = setting("AGENT_HEARTBEAT_TIMEOUT_SECONDS", "float", 90.0,
                                          "a node whose agent has not beaten for this long is unreachable")
# How long the agent driver waits for a command's result, and how often it looks (DB polling).
# Below the provisioning step deadline (15 min), so the reconciler never re-sends a step still waiting.
AGENT_COMMAND_TIMEOUT_SECONDS = setting("AGENT_COMMAND_TIMEOUT_SECONDS", "float", 600.0,
                                        "how long the agent driver waits for a command's result (below the 15-minute "
                                        "step deadline)")
AGENT_COMMAND_POLL_SECONDS = setting("AGENT_COMMAND_POLL_SECONDS", "float", 1.0,
                                     "how often it looks for the result")
# A command claimed with a lease (agent 1.3.0+) must be acknowledged as started within this long (DB clock), or it
# goes back to the queue and is handed out again: a crash or a lost poll answer no longer costs the whole timeout.
AGENT_COMMAND_LEASE_SECONDS = setting("AGENT_COMMAND_LEASE_SECONDS", "float", 30.0,
                                      "how long an agent (1.3.0+) has to acknowledge a command's start before it is "
                                      "handed out again")

# --- Redfish BMCs and bare metal ------------------------------------------------------------------------------------
# Fernet key (urlsafe base64, 32 bytes) for BMC passwords at rest; required in production.
BMC_CREDENTIALS_KEY = setting("BMC_CREDENTIALS_KEY", "str", "",
                              "Fernet key encrypting Redfish BMC credentials at rest; required in production",
                              doc_default="derived from `SECRET_KEY` outside production")
REDFISH_BOOT_TARGET = setting("REDFISH_BOOT_TARGET", "str", "Pxe",
                              "the deploy boot's Redfish boot source: `Pxe`, or `Cd` for virtual media")
REDFISH_POWER_TIMEOUT_SECONDS = setting("REDFISH_POWER_TIMEOUT_SECONDS", "float", 300.0,
                                        "how long a power change may take")
# Power-on + PXE deploy + boot take up to ~12 min; stay below the 15-min step deadline (no duplicate deploys).
REDFISH_AGENT_TIMEOUT_SECONDS = setting("REDFISH_AGENT_TIMEOUT_SECONDS", "float", 780.0,
                                        "how long power-on, PXE deploy and boot may take until the node's agent "
                                        "answers (below the 15-minute step deadline)")
REDFISH_HTTP_TIMEOUT_SECONDS = setting("REDFISH_HTTP_TIMEOUT_SECONDS", "float", 30.0, "each BMC call's time limit")
# Where the platform puts a node's one-time enrollment secret for its deploy boot (the boot server puts the file's
# line on that node's deploy kernel command line); empty = no deploy path (cleaning fails).
NODE_ENROLL_DIR = setting("NODE_ENROLL_DIR", "str", "",
                          "where the Redfish deploy boot's one-time enrollment secret is written for the boot server "
                          "(`<dir>/<hostname>`: `cardmix.enroll=cmxe_…`, for the deploy kernel command line; see "
                          "agent/README.md)", doc_default="empty (bare-metal cleaning fails)")
# A node-cleaning pass claims the node this long: longer than a whole pass can take (Redfish boot + wipe +
# a health check per card, about 2 h at the timeouts above), so a redelivered task never wipes alongside it.
NODE_CLEAN_CLAIM_SECONDS = setting("NODE_CLEAN_CLAIM_SECONDS", "int", 3 * 3600,
                                   "how long a node-cleaning pass owns the node (longer than a pass can take)")

# --- Slurm hybrid partitions ----------------------------------------------------------------------------------------
SLURM_SCONTROL = setting("SLURM_SCONTROL", "str", "",
                         "command prefix for the Slurm controller (e.g. `ssh slurm-head scontrol`)",
                         doc_default="empty (Slurm partitions off)")
SLURM_COMMAND_TIMEOUT_SECONDS = setting("SLURM_COMMAND_TIMEOUT_SECONDS", "float", 30.0,
                                        "each Slurm command's time limit")
SLURM_SACCTMGR = setting("SLURM_SACCTMGR", "str", "",
                         "sacctmgr command prefix (e.g. `ssh slurm-head sacctmgr`) that adds each organization's "
                         "account `cm-<12 hex of its id>` to slurmdbd before its partition is made",
                         doc_default="empty (accounts kept by the operator)")

# --- Unreachable nodes (provisioning/services/dark.py) --------------------------------------------------------------
# A running instance whose node went dark (agent heartbeat missed): its meters close at the node's last heartbeat +
# NODE_DARK_GRACE_SECONDS (seconds still billed: 0 = none of the dark period), what ticks charged after that is
# credited back; NODE_DARK_TIMEOUT_SECONDS after the last heartbeat NODE_DARK_ACTION applies: "fail" (cards released)
# or "move" (containers placed on other cards; bare metal fails).
NODE_DARK_GRACE_SECONDS = setting("NODE_DARK_GRACE_SECONDS", "int", 0,
                                  "an unreachable node's running instances: seconds after its last heartbeat still "
                                  "billed (what ticks charged after that is credited back)")
NODE_DARK_TIMEOUT_SECONDS = setting("NODE_DARK_TIMEOUT_SECONDS", "int", 900,
                                    "when, after the last heartbeat, they are failed or moved")
NODE_DARK_ACTION = setting("NODE_DARK_ACTION", "str", "fail",
                           "`fail` (cards released) or `move` (containers placed on other cards; bare metal fails)",
                           choices=("fail", "move"))
if not 0 <= NODE_DARK_GRACE_SECONDS <= NODE_DARK_TIMEOUT_SECONDS:
    raise ImproperlyConfigured("NODE_DARK_GRACE_SECONDS must be between 0 and NODE_DARK_TIMEOUT_SECONDS.")
