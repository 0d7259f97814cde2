"""The confirmation step of destructive console actions.

Their buttons are GET forms with hx-post and hx-confirm: with JavaScript htmx asks in the browser and posts;
without it the browser GETs the action's URL, which answers this page, and only its POST acts."""
from django.shortcuts import render


def confirm_page(request, *, title: str, detail: str, label: str, cancel: str):
    """"Are you sure…" with [label] (POST to this same URL) and Cancel (back to `cancel`)."""
    return render(request, "console/confirm.html", {"confirm": {
        "title": title, "detail": detail, "label": label, "action": request.path, "cancel": cancel}})
