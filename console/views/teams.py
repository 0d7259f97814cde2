"""Teams in the console: invite by email (a signed link; the account is created on acceptance) and create an
organization (tenancy/invitations.py holds the rules)."""
from django import forms
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext

from core.errors import ServiceError
from tenancy import invitations
from tenancy.choices import Role
from tenancy.middleware import SESSION_ORG_KEY
from tenancy.selectors import user_exists
from tenancy.throttles import SignupRateThrottle

from ..forms import form_errors_add
from .access import require_capability


class InviteByEmailForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class AcceptForm(forms.Form):
    name = forms.CharField(max_length=150, required=False)
    password = forms.CharField(widget=forms.PasswordInput, strip=False)


class OrganizationForm(forms.Form):
    name = forms.CharField(max_length=150)


@login_required
def member_invite(request):
    """Owners and admins of the current organization email an invitation (only owners invite owners)."""
    require_capability(request, "members_manage")
    owner = request.membership.role == Role.OWNER
    form = InviteByEmailForm(request.POST or None)
    form.fields["role"].choices = [(v, label) for v, label in Role.choices if owner or v != Role.OWNER]
    if request.method == "POST" and form.is_valid():
        try:
            invitations.invitation_send(actor_membership=request.membership, request=request, **form.cleaned_data)
        except ServiceError as exc:
            form_errors_add(form, exc)
        else:
            messages.success(request, gettext('Invitation sent to %(cleaned_data)s; the link is valid for seven days.') % {'cleaned_data': form.cleaned_data['email']})
            return redirect("console:members")
    return render(request, "console/account/invite.html", {"form": form}, status=400 if form.errors else 200)


def invitation_accept(request, token):
    """The emailed link: signed in as the invited address → join; no account → create one and join; an address
    with an account must log in first. A bad, used or expired link answers 404."""
    invitation = invitations.invitation_read(token)
    if invitation is None:
        return render(request, "console/account/invitation.html", {"invalid": True}, status=404)
    user = request.user if request.user.is_authenticated else None
    form = AcceptForm(request.POST or None) if user is None else None
    error = ""
    if request.method == "POST":
        if user is None and not SignupRateThrottle().allow_request(request, None):
            return render(request, "console/account/throttled.html", status=429)
        if form is None or form.is_valid():
            try:
                membership = invitations.invitation_accept(token=token, user=user, request=request,
                                                           **(form.cleaned_data if form else {}))
            except ServiceError as exc:
                error = exc.message  # the link's own fault, or the account's fields (next to them too)
                if form is not None and exc.details and set(exc.details) <= set(form.fields):
                    form_errors_add(form, exc)
                    error = ""
            else:
                if user is None:
                    login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
                request.session[SESSION_ORG_KEY] = str(membership.organization_id)
                messages.success(request, gettext('You joined %(name)s as %(role)s.') % {'name': membership.organization.name, 'role': membership.role})
                return redirect("console:dashboard")
    has_account = user is None and user_exists(email=invitation["email"])
    return render(request, "console/account/invitation.html", {
        "invitation": invitation, "form": form, "error": error, "has_account": has_account,
        "wrong_user": user is not None and user.email != invitation["email"],
        "login_url": f"{reverse('console:login')}?next={request.path}"}, status=400 if error else 200)


@login_required
def organization_new(request):
    """Create an organization you own and switch to it."""
    form = OrganizationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            org = invitations.organization_create_for_user(user=request.user, name=form.cleaned_data["name"],
                                                           request=request)
        except ServiceError as exc:
            form_errors_add(form, exc)
        else:
            request.session[SESSION_ORG_KEY] = str(org.pk)
            messages.success(request, gettext('Created %(name)s; you are its owner. Invite your team from Members.') % {'name': org.name})
            return redirect("console:members")
    return render(request, "console/account/organization_new.html", {"form": form}, status=400 if form.errors else 200)
