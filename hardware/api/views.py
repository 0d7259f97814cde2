"""The agent API: heartbeat (registration), command poll, start acknowledgement, result. Node tokens only;
nothing else accepted.

Not idempotency-keyed: a heartbeat overwrites the last one, a repeated start acknowledgement or result is a
no-op (the command id is the idempotency key), so a retrying agent is always safe.
"""
from django.conf import settings
from django.utils.translation import gettext
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from core.dbclock import db_now
from core.errors import ValidationFailed

from .. import services
from ..authentication import IsNodeAgent, NodeTokenAuthentication
from ..enrollment import node_enroll_exchange
from .serializers import (
    CommandSerializer,
    EnrollSerializer,
    HeartbeatSerializer,
    LeasedCommandSerializer,
    ResultSerializer,
    StartSerializer,
)


def _valid(serializer_class, data):
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise ValidationFailed(gettext("The request is invalid."), details=serializer.errors)
    return serializer.validated_data


class AgentView(APIView):
    """Base: node-token authentication only, no per-user throttling, no schema for customers."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes: list = []
    schema = None


class HeartbeatView(AgentView):
    def post(self, request):
        report = _valid(HeartbeatSerializer, request.data)
        cred = services.agent_heartbeat(credential=request.auth, report=report)
        node = services.node_for_agent(cred)
        return Response({
            "node": {"id": str(node.pk), "hostname": node.hostname, "card_count": node.card_count,
                     "accelerator": node.accelerator.slug, "collective": node.accelerator.collective,
                     "state": node.state},
            "heartbeat_interval_s": settings.AGENT_HEARTBEAT_SECONDS,
            "server_time": db_now().isoformat(),
        })


def _claim_limit(request) -> int:
    """`?limit=N` (1..CLAIM_LIMIT): a 1.2 agent asks for one command at a time, so none it holds unstarted is
    lost when it restarts; an older agent sends none and gets CLAIM_LIMIT, as before. A bad value is ignored."""
    try:
        limit = int(request.query_params.get("limit", services.CLAIM_LIMIT))
    except ValueError:
        return services.CLAIM_LIMIT
    return max(1, min(services.CLAIM_LIMIT, limit))


class CommandsView(AgentView):
    def get(self, request):
        """`?lease=1` (agents from 1.3.0): each command comes with a lease its start must be acknowledged under
        (POST …/start/); without it, as before, a command handed out is never handed out again."""
        lease = request.query_params.get("lease", "") in ("1", "true")
        rows = services.agent_commands_claim(credential=request.auth, limit=_claim_limit(request), lease=lease)
        serializer = LeasedCommandSerializer if lease else CommandSerializer
        return Response({"results": serializer(rows, many=True).data})


class StartView(AgentView):
    def post(self, request, command_id):
        data = _valid(StartSerializer, request.data)
        cmd = services.agent_command_start(credential=request.auth, command_id=command_id, lease=data["lease"])
        return Response({"id": str(cmd.pk), "state": cmd.state, "started_at": cmd.started_at})


class ResultView(AgentView):
    def post(self, request, command_id):
        data = _valid(ResultSerializer, request.data)
        cmd = services.agent_command_complete(credential=request.auth, command_id=command_id, **data)
        return Response({"id": str(cmd.pk), "state": cmd.state})


class EnrollView(AgentView):
    """A freshly imaged node's agent trades its one-time enrollment secret for a new node token, once. No node
    token here (it has none yet); a used, expired or unknown secret answers 401 token_invalid."""

    permission_classes = [AllowAny]
    throttle_classes = [AnonRateThrottle]

    def post(self, request):
        data = _valid(EnrollSerializer, request.data)
        enrolled = node_enroll_exchange(secret=data["secret"], request=request._request)
        if enrolled is None:
            raise AuthenticationFailed("The enrollment secret is invalid, used or expired.")
        cred, token = enrolled
        return Response({"token": token, "node": {"id": str(cred.node_id), "hostname": cred.node.hostname}})
