"""Admin building blocks shared by every app."""
from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from core.errors import ServiceError
from core.money import format_ucny


class ReadOnlyMixin:
    """Never added, edited or deleted through the admin."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Rows operators read but never add, edit or delete here (ledgers, logs, histories)."""


class ReadOnlyInline(ReadOnlyMixin, admin.TabularInline):
    """Rows the services write, shown on their parent's page."""

    extra = 0
    can_delete = False


def attach_service_error(form, exc: ServiceError) -> None:
    """A service's refusal on `form`: each detail on its field (or on the form, for a field it does not have),
    the message itself on the form when there are none."""
    for field, lines in (exc.details or {}).items():
        for line in lines if isinstance(lines, list) else [lines]:
            form.add_error(field if field in form.fields else None, line)
    if not exc.details:
        form.add_error(None, exc.message)


class ServiceRefusalMixin:
    """For admins whose save_model / save_related call services that can refuse (a ServiceError: a slug taken
    after the form was validated, a row that changed meanwhile): the refusal answers the form again, the service's
    message as an error message and its details as form errors, and saves nothing.

    changeform_view's transaction rolls back everything the save had written (audit rows, inlines); the same
    POST is then validated once more with the refusal attached to the form, so the page shows what was typed."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceError as exc:
            if request.method != "POST" or hasattr(request, "_service_refusal"):
                raise
            request._service_refusal = exc
        self.message_user(request, request._service_refusal.message, messages.ERROR)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form_class = super().get_form(request, obj, change, **kwargs)
        refusal = getattr(request, "_service_refusal", None)
        if refusal is None:
            return form_class

        def clean(form):
            data = super(refused, form).clean()
            attach_service_error(form, refusal)
            return data

        refused = type(form_class.__name__, (form_class,), {"clean": clean, "__module__": form_class.__module__})
        return refused


def cny_display(field: str, description: str, *, ucny_per_unit: int = 1):
    """A read-only admin column / detail row showing a µCNY field in CNY ("18.400000"), never the raw integer
    (`ucny_per_unit`: the field counts another unit, e.g. 10,000 for fen)."""

    @admin.display(description=description, ordering=field)
    def show(self, obj):
        value = getattr(obj, field)
        return "—" if value is None else format_ucny(value * ucny_per_unit)

    show.__name__ = f"{field}_cny"
    return show


def cny_fields(model, money) -> list[str]:
    """All of `model`'s fields for a read-only detail page, each µCNY one in `money` as its `<name>_cny` display
    (the admin defines those with cny_display)."""
    return [f"{f.name}_cny" if f.name in money else f.name for f in model._meta.fields]


class CnyField(forms.CharField):
    """A µCNY amount typed in CNY ("10000.50"): parsed exactly (at most 6 decimals) to integer µCNY; anything else
    (junk, NaN, too many decimals, negative, too large) is a form error."""

    def __init__(self, *, allow_negative: bool = False, **kwargs):
        self.allow_negative = allow_negative
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return format_ucny(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def to_python(self, value):
        from core.money import MoneyError, parse_cny

        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return parse_cny(text, allow_negative=self.allow_negative)
        except MoneyError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def has_changed(self, initial, data):
        try:
            return self.to_python(data) != (initial if isinstance(initial, int) else self.to_python(initial))
        except forms.ValidationError:
            return True


class ActionForm(forms.Form):
    """The intermediate page of an admin action: which rows (carried over), then the action's own fields."""

    _selected_action = forms.CharField(widget=forms.MultipleHiddenInput)
    action = forms.CharField(widget=forms.HiddenInput)


def form_action(modeladmin, request, *, label, form_class, items, apply, permission, title=None, note=""):
    """An admin action with a confirmation page: the page lists `items` ((pk, text) rows) and shows `form_class`
    (an ActionForm); once it is posted back with `apply` and valid, `apply(cleaned_data)` runs and returns
    (message, [refusal lines]) or an HttpResponse of its own.

    `permission` ("app.change_model") is required of the operator: Django offers an action without
    allowed_permissions to anyone who may view the list, and a read-only admin's has_change_permission is False
    for everyone, so the action itself checks."""
    if not request.user.has_perm(permission):
        modeladmin.message_user(request, gettext("You may not %(action)s.") % {"action": f"{label[:1].lower()}{label[1:]}"},
                                messages.ERROR)
        return None
    if "apply" in request.POST:
        form = form_class(request.POST)
        if form.is_valid():
            result = apply(form.cleaned_data)
            if not isinstance(result, tuple):
                return result
            done, refused = result
            modeladmin.message_user(request, done, messages.SUCCESS)
            for line in refused:
                modeladmin.message_user(request, line, messages.ERROR)
            return None
    else:
        form = form_class(initial={"_selected_action": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
                                   "action": request.POST.get("action")})
    opts = modeladmin.model._meta
    context = {**modeladmin.admin_site.each_context(request), "title": title or label, "form": form, "items": items,
               "opts": opts, "label": label, "note": note, "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
               "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")}
    return TemplateResponse(request, "admin/core/form_action.html", context)
