"""A real OpenID Connect provider for the SSO tests: django-oauth-toolkit with OIDC on, its own Django settings
and SQLite database, served on a loopback port by its own process (idp/server.py)."""
