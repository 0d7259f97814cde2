"""Template filters for the console: money rounded to the fen for display only."""
from django import template

from core.money import format_fen

register = template.Library()


@register.filter
def fen(amount_ucny):
    """µCNY → "¥12.35" (display only; the API keeps µCNY exact)."""
    if amount_ucny is None or amount_ucny == "":
        return "—"
    return format_fen(int(amount_ucny))
