"""A real OpenID Connect provider for the SSO tests: django-oauth-toolkit with OIDC on, its own Django settings
and database (on the test run's PostgreSQL server), served on a loopback port by its own process (idp/server.py)."""
