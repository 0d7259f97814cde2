"""Node-token authentication for the agent endpoints only (user tokens and sessions are refused there)."""
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from core.authentication import bearer_secret

from .enrollment import node_token_refused, revoked_token_find
from .models import NodeCredential
from .selectors import node_credential_authenticate
from .tokens import NODE_TOKEN_PREFIX

INVALID = "The node token is invalid, rotated or revoked."


class NodeAgentPrincipal:
    """request.user on agent endpoints: a node, never a person (is_staff False, no organization)."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False

    def __init__(self, credential: NodeCredential):
        self.credential = credential
        self.node = credential.node
        self.pk = None  # not a User: never stored as an audit actor

    def __str__(self):
        return f"node-agent:{self.node.hostname}"


class NodeTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer cmxn_…` → (NodeAgentPrincipal, NodeCredential); anything else → 401."""

    keyword = "Bearer"

    def authenticate(self, request):
        secret = bearer_secret(request, keyword=self.keyword, invalid=INVALID)
        if secret is None:
            return None  # → 401 not_authenticated (sessions are not consulted here)
        cred = node_credential_authenticate(secret=secret)
        if cred is None:
            revoked = revoked_token_find(secret) if secret.startswith(NODE_TOKEN_PREFIX) else None
            if revoked is not None:  # a node's own old token (a tenant may hold it): audited, then 401
                match = request._request.resolver_match
                node_token_refused(revoked=revoked, endpoint=match.url_name if match else request.path[:100],
                                   request=request._request)
            raise AuthenticationFailed(INVALID)
        return NodeAgentPrincipal(cred), cred

    def authenticate_header(self, request):
        return self.keyword


class IsNodeAgent(BasePermission):
    """Only a request authenticated by a node token."""

    def has_permission(self, request, view):
        return isinstance(request.auth, NodeCredential)
