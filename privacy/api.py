"""The organization export over the API: GET a ZIP (owners and admins). Routes appended to config/urls.py's API."""
from django.http import HttpResponse
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from tenancy.permissions import require

from .export import organization_export


def export_response(*, org, actor, request) -> HttpResponse:
    """The ZIP as an attachment named by the organization (the console uses it too)."""
    response = HttpResponse(organization_export(org=org, actor=actor, request=request), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="cardmix-export-{org.slug}.zip"'
    return response


class OrganizationExportView(APIView):
    """GET everything the organization has as a ZIP of CSV and JSON files (README.txt inside lists them)."""

    permission_classes = [require(read="read_audit")]

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    def get(self, request):
        return export_response(org=request.org, actor=request.user, request=request)


urlpatterns = [
    path("organizations/current/export/", OrganizationExportView.as_view(), name="organization-export"),
]
