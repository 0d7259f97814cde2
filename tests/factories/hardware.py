"""Factories and helpers for the hardware paths: agent nodes with tokens, BMC credentials."""
from hardware.services import bmc_credential_set, node_token_issue
from tests.factories.inventory import NodeFactory


def agent_node(**fields):
    """→ (node with driver "agent", its node token secret)."""
    node = NodeFactory(driver=fields.pop("driver", "agent"), **fields)
    _, secret = node_token_issue(node=node)
    return node, secret


def bmc_credential(name="bmc-test", username="admin", password="s3cret-bmc", verify_tls=False):
    """A stored (encrypted) BMC login."""
    return bmc_credential_set(name=name, username=username, password=password, verify_tls=verify_tls)
