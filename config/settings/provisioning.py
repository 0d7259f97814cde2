"""Provisioning: instances' deadlines and retention, the fleet driver, warm pools, containers' ports on the nodes,
clusters of several parts, and the platform's per-instance SSH keys."""
import ipaddress

from django.core.exceptions import ImproperlyConfigured

from core.settings_registry import section, setting

section("Provisioning", "Instances' deadlines (SPEC values), the fleet driver, warm pools, containers' ports on the "
        "nodes and multi-part clusters.")

# --- Deadlines and retention (docs/spec.md) -------------------------------------------------------------------------
SLA_SECONDS = setting("SLA_SECONDS", "int", 15 * 60,
                      "an instance must be running this long after its create or start (or wake-up), or the "
                      "organization is credited")
WAITLIST_EXPIRY_HOURS = setting("WAITLIST_EXPIRY_HOURS", "int", 24,
                                "a waitlisted instance expires after this (`waitlist_expired`)")
STOPPED_RETENTION_DAYS = setting("STOPPED_RETENTION_DAYS", "int", 15,
                                 "a stopped instance is kept this long, then terminated (`retention_expired`)")

# --- The fleet driver -----------------------------------------------------------------------------------------------
PROVISIONING_DRIVER = setting("PROVISIONING_DRIVER", "str", "simulated",
                              "the driver of nodes that name none (`Node.driver`)",
                              choices=("simulated", "agent", "redfish"))
SIMULATOR_PROFILE = setting("SIMULATOR_PROFILE", "str", "dev",
                            "the simulated driver's timings and failure rates (`provisioning/drivers/sim_profiles.py`)",
                            choices=("dev", "realistic"))
# Multiplies every simulated delay (0 = no sleeping: tests and benchmarks).
SIMULATOR_DELAY_SCALE = setting("SIMULATOR_DELAY_SCALE", "float", 1.0,
                                "multiplies every simulated delay (0: no sleeping, for tests and benchmarks)")
SIMULATOR_FAILURE_SCALE = setting("SIMULATOR_FAILURE_SCALE", "float", 1.0,
                                  "multiplies every simulated failure rate (0: nothing fails)")

# --- Warm pools (provisioning/services/warm_pool.py) ----------------------------------------------------------------
WARM_POOL_MAX_AGE_HOURS = setting("WARM_POOL_MAX_AGE_HOURS", "float", 24.0,
                                  "a warm-pool node counts as warm while its readiness check is younger than this "
                                  "(see [warm pool](/architecture/lifecycle.md#warm-pool))")

# --- Containers' SSH ports ------------------------------------------------------------------------------------------
# Each container's sshd is published on its node at CONTAINER_SSH_PORT_BASE + its first card's index
# (cards are held exclusively, so two live containers on one node never share a port): open
# BASE..BASE+63 on the nodes' firewall. Bare metal is reached on the node's own ssh_port.
CONTAINER_SSH_PORT_BASE = setting("CONTAINER_SSH_PORT_BASE", "int", 30000,
                                  "node port of a container's sshd = base + its first card index (open "
                                  "base..base+63); bare metal is reached on the node's own SSH port")
if not 1024 <= CONTAINER_SSH_PORT_BASE <= 65535 - 64:
    raise ImproperlyConfigured("CONTAINER_SSH_PORT_BASE must be between 1024 and 65471 (64 cards per node).")
# Fernet key for the platform's per-instance SSH keys (provisioning/platform_keys.py); required in production.
PLATFORM_KEYS_KEY = setting("PLATFORM_KEYS_KEY", "str", "",
                            "Fernet key sealing each instance's platform SSH key (the gateway's and web terminal's "
                            "way in, never a user's key); required in production",
                            doc_default="derived from `SECRET_KEY` outside production")

# --- Clusters (provisioning/services/cluster.py) --------------------------------------------------------------------
# The parts of a multi-node or hybrid instance get a /24 of CLUSTER_SUBNET_POOL (VXLAN zones) and VXLAN id
# CLUSTER_VNI_BASE + its slot; the rendezvous port is CLUSTER_MASTER_PORT_BASE + the master part's first card, the
# readiness TCP probe CLUSTER_PROBE_PORT_BASE + a part's first card (unique per node, as with SSH ports, so
# host-network parts of two instances never collide).
CLUSTER_SUBNET_POOL = setting("CLUSTER_SUBNET_POOL", "str", "10.96.0.0/12",
                              "the IPv4 network (a /24 or more) a multi-part instance's private /24 comes from, in "
                              "`vxlan` zones")
try:
    if ipaddress.ip_network(CLUSTER_SUBNET_POOL).prefixlen > 24:
        raise ValueError("smaller than a /24")
except ValueError as exc:
    raise ImproperlyConfigured(f"CLUSTER_SUBNET_POOL must be an IPv4 network of a /24 or more: {exc}") from exc
CLUSTER_VNI_BASE = setting("CLUSTER_VNI_BASE", "int", 100000, "a multi-part instance's VXLAN id = base + its slot")
CLUSTER_MASTER_PORT_BASE = setting("CLUSTER_MASTER_PORT_BASE", "int", 29500,
                                   "rendezvous `MASTER_PORT` = base + the master part's first card")
CLUSTER_PROBE_PORT_BASE = setting("CLUSTER_PROBE_PORT_BASE", "int", 29400,
                                  "readiness TCP probe port = base + the part's first card")
CLUSTER_PROBE_TIMEOUT_SECONDS = setting("CLUSTER_PROBE_TIMEOUT_SECONDS", "float", 60.0,
                                        "the probe's time limit")
