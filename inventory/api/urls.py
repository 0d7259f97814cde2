"""inventory API routes."""
urlpatterns: list = []
