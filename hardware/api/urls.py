"""/api/v1/agent/…: the node agent's endpoints (node token only)."""
from django.urls import path

from . import views

urlpatterns = [
    path("agent/heartbeat/", views.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/enroll/", views.EnrollView.as_view(), name="agent-enroll"),
    path("agent/commands/", views.CommandsView.as_view(), name="agent-commands"),
    path("agent/commands/<uuid:command_id>/start/", views.StartView.as_view(), name="agent-command-start"),
    path("agent/commands/<uuid:command_id>/result/", views.ResultView.as_view(), name="agent-command-result"),
]
