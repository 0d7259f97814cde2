from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The web console: views, forms and templates only; no domain models."""

    name = "console"
