"""allauth's forms as Cardmix posts them."""
from allauth.account.forms import LoginForm as AllauthLoginForm


class LoginForm(AllauthLoginForm):
    """allauth's login form with its `login` field posted as `username`: the name the console's login form,
    scripts and django-axes (AXES_USERNAME_FORM_FIELD) used before allauth."""

    def add_prefix(self, field_name):
        return "username" if field_name == "login" else super().add_prefix(field_name)
