"""Tenancy API routes (filled by the tenancy issue)."""
urlpatterns: list = []
