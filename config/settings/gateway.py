"""The SSH gateway (manage.py ssh_gateway, provisioning/gateway/): one address for the whole fleet."""
from urllib.parse import urlsplit

from core.settings_registry import section, setting

from .django import SITE_URL, VAR_DIR

section("SSH gateway", "`manage.py ssh_gateway`: one address for the whole fleet, where platform SSH keys log in; "
        "the gateway reaches each instance's sshd with the instance's platform key.")

SSH_GATEWAY_ADDR = setting("SSH_GATEWAY_ADDR", "str", "127.0.0.1", "the address `manage.py ssh_gateway` listens on")
SSH_GATEWAY_PORT = setting("SSH_GATEWAY_PORT", "int", 2222, "its port")
SSH_GATEWAY_HOST_KEY = setting("SSH_GATEWAY_HOST_KEY", "str", str(VAR_DIR / "ssh_gateway_host_key"),
                               "its host key (ed25519, made with mode 0600 on the first start; keep it: clients pin "
                               "it)", doc_default="`CARDMIX_VAR_DIR/ssh_gateway_host_key`")
SSH_GATEWAY_PUBLIC_HOST = setting("SSH_GATEWAY_PUBLIC_HOST", "str", "",
                                  "the gateway's host as users reach it, shown in the instance body's `ssh_gateway` "
                                  "and on the instance page", doc_default="`SITE_URL`'s host"
                                  ) or urlsplit(SITE_URL).hostname or ""
SSH_GATEWAY_PUBLIC_PORT = setting("SSH_GATEWAY_PUBLIC_PORT", "int", SSH_GATEWAY_PORT, "the port users reach it on",
                                  doc_default="`SSH_GATEWAY_PORT`")
# How often open gateway sessions are checked against revoked keys, removed members and stopped instances.
SSH_GATEWAY_RECHECK_SECONDS = setting("SSH_GATEWAY_RECHECK_SECONDS", "float", 20.0,
                                      "how often open sessions are checked; a removed key or member, or an instance "
                                      "no longer running, is closed within this")
