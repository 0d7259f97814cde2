"""Console routes. Each area has its own views module under console/views/."""
from django.contrib.auth import views as auth_views
from django.urls import path

from .views import pages

app_name = "console"

urlpatterns = [
    path("", pages.landing, name="landing"),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("dashboard/", pages.dashboard, name="dashboard"),
]
