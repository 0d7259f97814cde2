"""billing API routes."""
urlpatterns: list = []
