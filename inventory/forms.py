"""Admin forms: the reason asked for by every node state and card health action, and the CSV upload."""
from django import forms
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.utils.translation import gettext_lazy

from core.admin import ActionForm


class ReasonForm(ActionForm):
    """The intermediate page of a node or card action: which rows, and why."""

    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                             help_text=gettext_lazy("Shown to other operators and kept in the audit log."))

    selected_field = ACTION_CHECKBOX_NAME


class NodeCsvImportForm(forms.Form):
    """Upload of a node CSV (columns: hostname, zone, accelerator[, card_count, driver, ssh_host, ssh_port,
    bmc_address, bmc_credentials_ref, state])."""

    file = forms.FileField(help_text=gettext_lazy("UTF-8 CSV with a header row; all rows are checked before any is imported."))
