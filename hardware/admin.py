"""Operators' admin: issue / rotate node agent tokens (the secret is shown once), see heartbeats and
agent commands and the cards' health signals, and keep BMC credentials (write-only password, encrypted at rest)."""
from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils.translation import gettext, gettext_lazy

from core.admin import ActionForm, ReadOnlyAdmin, form_action
from inventory.models import Node
from tenancy.admin import AuditedDeleteMixin
from tenancy.audit import audit_record

from . import services
from .bmc_secrets import bmc_encrypt
from .models import AgentCommand, AgentNode, BmcCredential, CardSignal, NodeCredential


@admin.register(AgentNode)
class AgentNodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "driver", "state", "token_prefix", "last_heartbeat", "agent_version"]
    list_filter = ["driver", "state"]
    search_fields = ["hostname"]
    actions = ["issue_agent_token"]
    fields = ["hostname", "driver", "state", "state_reason", "token_prefix", "last_heartbeat", "agent_version",
              "facts"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("agent_credential")

    def has_add_permission(self, request):
        return False  # nodes are created in the inventory admin

    def has_delete_permission(self, request, obj=None):
        return False

    def _cred(self, obj):
        return getattr(obj, "agent_credential", None)

    @admin.display(description=gettext_lazy("token"))
    def token_prefix(self, obj):
        cred = self._cred(obj)
        return f"{cred.prefix}…" if cred else "—"

    @admin.display(description=gettext_lazy("last heartbeat"))
    def last_heartbeat(self, obj):
        cred = self._cred(obj)
        return cred.last_heartbeat_at if cred else None

    @admin.display(description=gettext_lazy("agent"))
    def agent_version(self, obj):
        cred = self._cred(obj)
        return f"{cred.agent_version} ({cred.runtime})" if cred and cred.agent_version else "—"

    @admin.display(description=gettext_lazy("last report"))
    def facts(self, obj):
        cred = self._cred(obj)
        return cred.facts if cred else {}

    @admin.action(description=gettext_lazy("Issue / rotate agent token (shown once)…"))
    def issue_agent_token(self, request, queryset):
        """A confirmation page lists the nodes first (rotating cuts each one's running agent off until it is
        restarted with the new token); then each new token is shown once."""
        if not request.user.is_superuser and not request.user.has_perm("hardware.change_nodecredential"):
            self.message_user(request, gettext("You may not issue agent tokens."), messages.ERROR)
            return None
        nodes = list(queryset.order_by("hostname"))
        items = [(node.pk, f"{node.hostname} — " + (
            gettext("rotate %(prefix)s…: its agent is cut off until restarted with the new token") % {
                "prefix": cred.prefix} if (cred := self._cred(node)) else gettext("first token"))) for node in nodes]

        def apply(_data):
            issued = [(node, services.node_token_issue(node=node, actor=request.user, request=request)[1])
                      for node in nodes]
            # Rendered once in this response; nothing stores the secrets (no message cookie, no session).
            response = TemplateResponse(request, "admin/hardware/agent_tokens.html",
                                        {**self.admin_site.each_context(request), "issued": issued,
                                         "title": gettext("Agent tokens"), "server": request.build_absolute_uri("/")[:-1]})
            response["Cache-Control"] = "no-store"
            return response

        rotating = sum(1 for node in nodes if self._cred(node))
        return form_action(self, request, label=gettext("Issue / rotate agent tokens"), form_class=ActionForm, items=items,
                           apply=apply, permission="hardware.change_nodecredential",
                           note=gettext("%(nodes)s node(s); %(rotating)s running agent(s) will be cut off until "
                                        "restarted with the new token.") % {"nodes": len(nodes), "rotating": rotating}
                           if rotating else "")


@admin.register(AgentCommand)
class AgentCommandAdmin(admin.ModelAdmin):
    list_display = ["created_at", "node", "kind", "state", "exit_code", "duration_s"]
    list_filter = ["kind", "state"]
    search_fields = ["node__hostname", "id"]
    list_select_related = ["node"]
    readonly_fields = [f.name for f in AgentCommand._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # a driver may be waiting for its result; the reconciler and step deadlines end stuck ones


@admin.register(CardSignal)
class CardSignalAdmin(ReadOnlyAdmin):
    """The evidence behind a card's degraded or failed health (read-only): what its agent's tools said, when.
    A card is made healthy again in Inventory → Cards (*Mark healthy*, with a reason)."""

    list_display = ["seen_at", "node", "card", "klass", "kind", "code", "detail"]
    list_filter = ["klass", "kind"]
    search_fields = ["node__hostname", "detail"]
    list_select_related = ["node", "card__node"]
    readonly_fields = [f.name for f in CardSignal._meta.fields]


class BmcCredentialForm(forms.ModelForm):
    """The password is write-only: never rendered back, re-entered to change it."""

    password = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False,
                               help_text=gettext_lazy("Stored encrypted (BMC_CREDENTIALS_KEY). Leave empty to keep the current one."))

    class Meta:
        model = BmcCredential
        fields = ["name", "username", "verify_tls"]

    def clean(self):
        data = super().clean()
        if not self.instance.pk and not data.get("password"):
            self.add_error("password", gettext("A password is required."))
        return data


@admin.register(BmcCredential)
class BmcCredentialAdmin(AuditedDeleteMixin, admin.ModelAdmin):
    """A credential a node names (Node.bmc_credentials_ref) is neither deleted nor renamed: the node's power and
    boot calls would fail to find their login. Unused ones may be deleted, audited."""

    form = BmcCredentialForm
    list_display = ["name", "username", "verify_tls", "updated_at"]
    search_fields = ["name"]
    delete_action = "bmc_credential.delete"

    @staticmethod
    def _in_use(obj) -> bool:
        return obj is not None and Node.objects.filter(bmc_credentials_ref=obj.name).exists()

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and not self._in_use(obj)

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if self._in_use(obj) else []

    def delete_details(self, obj) -> dict:
        return {"name": obj.name}

    def save_model(self, request, obj, form, change):
        password = form.cleaned_data.get("password")
        if password:
            obj.password_encrypted = bmc_encrypt(password)
        super().save_model(request, obj, form, change)
        audit_record(action="bmc_credential.update" if change else "bmc_credential.create", actor=request.user,
                     request=request, target=obj, details={"name": obj.name, "password_changed": bool(password)})


@admin.register(NodeCredential)
class NodeCredentialAdmin(admin.ModelAdmin):
    list_display = ["node", "prefix", "registered_at", "last_heartbeat_at", "heartbeat_deadline", "runtime",
                    "revoked_at"]
    list_select_related = ["node"]
    readonly_fields = ["node", "prefix", "issued_at", "rotated_at", "registered_at", "last_heartbeat_at",
                       "heartbeat_deadline", "agent_version", "runtime", "facts", "revoked_at", "enroll_until"]
    exclude = ["token_hash", "enroll_hash"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        # Deleting dropped the node's saved state and reason, unaudited; rotate the token instead (Node agents).
        return False
