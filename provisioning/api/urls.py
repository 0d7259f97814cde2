"""provisioning API routes."""
urlpatterns: list = []
