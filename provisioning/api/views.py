"""Instances, their events and readiness reports, and quotes (SPEC §5)."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.dbclock import db_now, db_time
from core.idempotency import idempotent
from core.pagination import LimitOffsetEnvelopePagination, list_parameters
from core.serializers import body_refuse_unknown
from storage.api.serializers import AttachmentInputSerializer
from tenancy.permissions import require

from .. import selectors
from ..choices import BillingMode, InstanceState
from ..notices import instance_notices, notices_of_row
from ..services import billing_port, storage_port
from ..services.health_move import instance_move_healthy
from ..services.instances import instance_create, instance_start, instance_stop, instance_terminate
from ..services.packages import instance_package_renewal_set
from ..services.quotes import quote_compute
from ..services.specs import spec_from_data
from ..services.volumes import instance_volume_attach, instance_volume_detach
from . import schema_docs as docs
from .rows import InstanceRow, group_row_from, instance_body
from .serializers import (
    InstanceCreateSerializer,
    InstanceEventSerializer,
    InstanceSerializer,
    PackageRenewalSerializer,
    QuoteSerializer,
    ReadinessReportSerializer,
    StateFilterSerializer,
    quote_body,
)


def _context(instances) -> dict:
    """Costs, waitlist positions, package periods and the database clock, each fetched once for the page."""
    ids = [i.pk for i in instances]
    return {"costs": billing_port.instance_costs(ids) if ids else {},
            "positions": selectors.waitlist_positions(instances), "now": db_now(),
            "packages": billing_port.packages_current(instances), "notices": instance_notices(instances),
            "storage": storage_port.storage_bodies(ids) if ids else {}}


def _page_bodies(page) -> list:
    """The bodies of a page of selectors.instance_list_rows (tuples): every figure from the row itself, but the
    waitlist positions (one query for the page's waitlisted rows)."""
    rows = [InstanceRow._make(t) for t in page]
    if not rows:
        return []
    context = {"costs": {r.id: r.cost for r in rows}, "positions": selectors.waitlist_positions(rows),
               "now": db_time(rows[0].now),
               "packages": {r.id: billing_port.package_of_row(r.package) for r in rows
                            if r.package and r.billing == BillingMode.MONTHLY},
               "notices": {r.id: notices_of_row(kind=r.kind, billing=r.billing, dark=r.dark, health=r.health)
                           for r in rows if r.dark or r.health},
               "storage": {r.id: storage_port.storage_body_of_row(r.volumes, r.datasets)
                           for r in rows if r.volumes or r.datasets}}
    return [instance_body(r, [group_row_from(r.id, g) for g in r.group_rows or ()], **context) for r in rows]


def _action_response(request, instance, code) -> Response:
    """An action's answer (a stop waits for it): the body as the list shows it, read as the list reads a page."""
    (body,) = _page_bodies(selectors.instance_list_rows(org=request.org, instance_id=instance.pk))
    return Response(body, status=code)


def _instance_response(request, instance, code=status.HTTP_200_OK) -> Response:
    fresh = selectors.instance_get(org=request.org, instance_id=instance.pk)
    return Response(InstanceSerializer(fresh, context=_context([fresh])).data, status=code)


class InstanceListCreateView(APIView):
    """GET: the organization's instances (?state=); POST: create one (201, or 202 when waitlisted)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(operation_id="instances_list",
                   parameters=[OpenApiParameter("state", str, description="comma-separated states"),
                               *list_parameters()],
                   responses={200: docs.PaginatedInstanceDoc})
    def get(self, request):
        # ?state=running,stopped (the documented form) and ?state=running&state=stopped both work: split
        # before validating, so each state is checked on its own and an unknown one is still a 400.
        wanted = [s.strip() for raw in request.query_params.getlist("state") for s in raw.split(",") if s.strip()]
        states = ""
        if wanted:  # nothing to check without ?state= (the usual poll)
            filt = StateFilterSerializer(data={"state": wanted})
            filt.is_valid(raise_exception=True)
            states = ",".join(sorted(filt.validated_data["state"]))
        paginator = LimitOffsetEnvelopePagination()
        # Plain rows, not models and one serializer per row: the list is the busiest read (docs/performance.md).
        page = paginator.paginate_queryset(selectors.instance_list_rows(org=request.org, state=states or None),
                                           request, view=self)
        return paginator.get_paginated_response(_page_bodies(page))

    @extend_schema(request=InstanceCreateSerializer, responses={201: docs.InstanceDoc, 202: docs.InstanceDoc})
    @idempotent()
    def post(self, request):
        body = InstanceCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        instance = instance_create(
            org=request.org, actor=request.user, spec=spec_from_data(data), name=data["name"],
            ssh_key_ids=data["ssh_key_ids"], waitlist=data["waitlist"], package_renewal=data["package_renewal"],
            request=request, volumes=data.get("volumes") or [], datasets=data.get("datasets") or [])
        code = status.HTTP_202_ACCEPTED if instance.state == InstanceState.WAITLISTED else status.HTTP_201_CREATED
        return _instance_response(request, instance, code)


class InstanceDetailView(APIView):
    """GET one instance; DELETE terminates it (202, again for terminating/terminated)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(responses={200: docs.InstanceDoc})
    def get(self, request, instance_id):
        instance = selectors.instance_get(org=request.org, instance_id=instance_id)
        return Response(InstanceSerializer(instance, context=_context([instance])).data)

    @extend_schema(responses={202: docs.InstanceDoc})
    def delete(self, request, instance_id):
        selectors.instance_get(org=request.org, instance_id=instance_id)  # 404 first, before any lock
        body_refuse_unknown(request)
        instance = instance_terminate(org=request.org, instance_id=instance_id, actor=request.user, request=request)
        return _instance_response(request, instance, status.HTTP_202_ACCEPTED)


ACTIONS = {"stop": instance_stop, "start": instance_start, "move": instance_move_healthy}


class InstanceActionView(APIView):
    """POST /stop/, /start/ or /move/ (a running container off its failed card onto healthy ones, volumes kept):
    202 with the instance body; 409 invalid_state when the table (or, for a move, the instance) forbids it."""

    permission_classes = [require(read="read", write="instances")]
    action = ""

    @extend_schema(request=None, responses={202: docs.InstanceDoc})
    def post(self, request, instance_id):
        if request.data:  # a body to refuse: another organization's id answers 404 first, as everywhere
            selectors.instance_get(org=request.org, instance_id=instance_id)
            body_refuse_unknown(request)
        service = ACTIONS[self.action]  # its lock is scoped to the organization: 404 for another one's id
        instance = service(org=request.org, instance_id=selectors.instance_pk(instance_id), actor=request.user,
                           request=request)
        return _action_response(request, instance, status.HTTP_202_ACCEPTED)


class InstancePackageRenewalView(APIView):
    """POST {"package_renewal": "renew" | "on_demand" | "stop"}: what happens when the monthly package period
    ends (the active period and later ones); 409 for an on-demand or terminated instance."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(request=PackageRenewalSerializer, responses={200: docs.InstanceDoc})
    def post(self, request, instance_id):
        selectors.instance_get(org=request.org, instance_id=instance_id)  # 404 first, before any lock
        body = PackageRenewalSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        instance = instance_package_renewal_set(org=request.org, instance_id=instance_id, actor=request.user,
                                                renewal=body.validated_data["package_renewal"], request=request)
        return _instance_response(request, instance)


class InstanceEventsView(APIView):
    """GET the state history (paginated, oldest first)."""

    permission_classes = [require(read="read", write=None)]

    @extend_schema(parameters=list_parameters(), responses={200: docs.PaginatedInstanceEventDoc})
    def get(self, request, instance_id):
        instance = selectors.instance_get(org=request.org, instance_id=instance_id)
        paginator = LimitOffsetEnvelopePagination()
        page = paginator.paginate_queryset(selectors.instance_events(instance=instance), request, view=self)
        return paginator.get_paginated_response([InstanceEventSerializer(e).data for e in page])


class InstanceReadinessView(APIView):
    """GET the readiness reports per node group (paginated, in the order they ran)."""

    permission_classes = [require(read="read", write=None)]

    @extend_schema(parameters=list_parameters(), responses={200: docs.PaginatedReadinessReportDoc})
    def get(self, request, instance_id):
        instance = selectors.instance_get(org=request.org, instance_id=instance_id)
        paginator = LimitOffsetEnvelopePagination()
        page = paginator.paginate_queryset(selectors.instance_reports(instance=instance), request, view=self)
        return paginator.get_paginated_response([ReadinessReportSerializer(r).data for r in page])


class QuoteView(APIView):
    """POST a create body: the mix the system would choose, its price, and whether it fits now."""

    # A quote changes nothing: every role that may read instances may ask for one.
    permission_classes = [require(read="read", write="read")]

    @extend_schema(request=QuoteSerializer, responses={200: docs.QuoteDoc})
    def post(self, request):
        body = QuoteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        volumes, datasets = data.get("volumes") or [], data.get("datasets") or []
        spec = spec_from_data(data)
        if volumes or datasets:  # the zone they pin the instance to, and their price
            spec = storage_port.create_spec_zone(org=request.org, spec=spec, volumes=volumes, datasets=datasets)
        storage = storage_port.quote_storage(org=request.org, volumes=volumes, datasets=datasets)
        return Response(quote_body(quote_compute(spec=spec), storage))


class InstanceVolumesView(APIView):
    """POST {"volume", "mount_path"?}: attach a volume to a stopped instance (its next start mounts it)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(request=AttachmentInputSerializer, responses={201: OpenApiTypes.OBJECT})
    def post(self, request, instance_id):
        selectors.instance_get(org=request.org, instance_id=instance_id)  # 404 first, before any lock
        body = AttachmentInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        instance_volume_attach(org=request.org, instance_id=instance_id, actor=request.user, request=request,
                               volume_id=body.validated_data["volume"],
                               mount_path=body.validated_data.get("mount_path"))
        return _instance_response(request, selectors.instance_get(org=request.org, instance_id=instance_id),
                                  status.HTTP_201_CREATED)


class InstanceVolumeDetailView(APIView):
    """DELETE: detach the volume from the stopped instance (the volume is kept)."""

    permission_classes = [require(read="read", write="instances")]

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def delete(self, request, instance_id, volume_id):
        selectors.instance_get(org=request.org, instance_id=instance_id)
        body_refuse_unknown(request)
        instance_volume_detach(org=request.org, instance_id=instance_id, volume_id=volume_id, actor=request.user,
                               request=request)
        return _instance_response(request, selectors.instance_get(org=request.org, instance_id=instance_id))
