"""allauth's forms as Cardmix posts them."""
from allauth.account.forms import LoginForm as AllauthLoginForm
from allauth.account.forms import SignupForm as AllauthSignupForm
from django import forms
from django.utils.translation import gettext_lazy


class LoginForm(AllauthLoginForm):
    """allauth's login form with its `login` field posted as `username`: the name the console's login form,
    scripts and django-axes (AXES_USERNAME_FORM_FIELD) used before allauth."""

    def add_prefix(self, field_name):
        return "username" if field_name == "login" else super().add_prefix(field_name)


class SignupForm(AllauthSignupForm):
    """allauth's sign-up form (email, password1) and the person's name; the adapter's save_user makes the account."""

    name = forms.CharField(label=gettext_lazy("Name"), max_length=150, required=False)
    field_order = ["name", "email", "password1"]
