"""Accounts: sign-in protection (django-axes), sign-up, organizations' limits, real-name verification, and
django-allauth (login, sign-up, email verification, password reset, MFA, SSO)."""
from datetime import timedelta

from core.settings_registry import section, setting

from .django import DEBUG, LOGOUT_REDIRECT_URL

section("Accounts", "Sign-in protection, sign-up, organizations' limits, real-name verification (实名认证), MFA and "
        "SSO. See the [security model](/security.md) and [MFA and SSO](/security.md#accounts-mfa-and-sso).")

# --- Login protection (django-axes) ---------------------------------------------------------------------------------
# The client address for lockout, throttles and audit: see core/clientip.py.
AXES_CLIENT_IP_CALLABLE = "core.clientip.client_ip"
AXES_FAILURE_LIMIT = setting("AXES_FAILURE_LIMIT", "int", 5,
                             "failed sign-ins of one username from one address before they are locked out")
AXES_COOLOFF_TIME = timedelta(minutes=setting("AXES_COOLOFF_MINUTES", "int", 15, "how long a lockout lasts"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLED = setting("AXES_ENABLED", "bool", True, "count failed sign-ins and lock out (django-axes)")
# django-axes reads the login name from this form field / credential key; its default is the user
# model's USERNAME_FIELD ("email"), which Django's login form does not send, so failures were
# recorded without a username and the username+IP lockout never matched a later attempt.
AXES_USERNAME_FORM_FIELD = "username"
AXES_USERNAME_CALLABLE = "core.security.axes_username"

# --- Sign-up and organizations (docs/spec.md) -----------------------------------------------------------------------
DEFAULT_CARD_QUOTA = setting("DEFAULT_CARD_QUOTA", "int", 16, "cards a new organization may hold at once (SPEC)")
REFUSED_EMAIL_DOMAINS = setting("REFUSED_EMAIL_DOMAINS", "list", [],
                                "email domains refused at sign-up, comma-separated")

# --- Real-name verification (tenancy/realname) ----------------------------------------------------------------------
# What an organization may do before its real-name verification is approved (tenancy/realname/policy.py):
# no card type whose slug starts with one of these, no bare metal, top-ups up to this much in all (µCNY).
# Refusals are 403 verification_required (docs/operations/realname-and-privacy.md).
REALNAME_POLICY = setting("REALNAME_POLICY", "bool", True,
                          "limit what an organization may do before its real-name verification is approved (off: "
                          "unverified organizations are not limited; refusals are 403 `verification_required`, see "
                          "[real-name verification](realname-and-privacy.md#real-name-verification))")
REALNAME_UNVERIFIED_REFUSED_ACCELERATORS = setting(
    "REALNAME_UNVERIFIED_REFUSED_ACCELERATORS", "list", ["h100", "h800"],
    "before verification: card type slug prefixes refused, comma-separated")
REALNAME_UNVERIFIED_BARE_METAL = setting("REALNAME_UNVERIFIED_BARE_METAL", "bool", False,
                                         "before verification: whether bare metal may be ordered")
REALNAME_UNVERIFIED_TOPUP_MAX_UCNY = setting("REALNAME_UNVERIFIED_TOPUP_MAX_UCNY", "int", 100_000_000,
                                             "before verification: top-ups in all, µCNY (100 CNY)")
REALNAME_KEY = setting("REALNAME_KEY", "str", "",
                       "Fernet key sealing identification numbers at rest; required in production",
                       doc_default="derived from `SECRET_KEY` outside production")
REALNAME_PROVIDER = setting("REALNAME_PROVIDER", "str", "",
                            "dotted path of an automated check `f(verification, id_number) -> {\"verdict\": …, "
                            "\"reason\": …}` (the verdict `\"approved\"`, `\"rejected\"` or `None`) called on each "
                            "submission (none bundled: operators review in the admin)")

# --- django-allauth: login, sign-up, email verification, password reset ---------------------------------------------
# allauth's views behind the console's URLs (/login/, /signup/, /password-reset/); the adapter and the sign-up form
# (tenancy/allauth_*.py) make its accounts Cardmix's: personal organization, trial on the confirmed address.
ACCOUNT_ADAPTER = "tenancy.allauth_adapters.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "tenancy.allauth_adapters.SocialAccountAdapter"
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*"]
# Optional: a new account is signed in at once (the console works, the trial waits); the emailed link confirms the
# address, and the adapter's confirm_email grants the trial (once per mailbox).
ACCOUNT_EMAIL_VERIFICATION = "optional"
ACCOUNT_CONFIRM_EMAIL_ON_GET = True  # one click on the emailed link, as before allauth
ACCOUNT_EMAIL_CONFIRMATION_EXPIRE_DAYS = 3
ACCOUNT_EMAIL_SUBJECT_PREFIX = ""  # the subjects name Cardmix themselves
ACCOUNT_EMAIL_UNKNOWN_ACCOUNTS = False  # a reset for an unknown address sends nothing (no mail to strangers)
# Django's own token (it hashes the account's one address already): reset links mailed before allauth stay valid.
ACCOUNT_PASSWORD_RESET_TOKEN_GENERATOR = "django.contrib.auth.tokens.PasswordResetTokenGenerator"
ACCOUNT_LOGOUT_REDIRECT_URL = LOGOUT_REDIRECT_URL
ACCOUNT_AUTHENTICATED_LOGIN_REDIRECTS = False  # /login/ shows the form to a signed-in user too, as before allauth
ACCOUNT_FORMS = {"login": "tenancy.allauth_forms.LoginForm", "signup": "tenancy.allauth_forms.SignupForm"}
# django-axes counts failed logins and locks username + IP; allauth's own failed-login limit would answer first.
# The per-IP sign-up throttle (THROTTLE_SIGNUP) limits verification mails; allauth's per-address cooldown would
# silently drop the link of an address signed up again (after its account was deleted) within minutes.
ACCOUNT_RATE_LIMITS = {"login_failed": False, "confirm_email": False}

# --- MFA ------------------------------------------------------------------------------------------------------------
MFA_SUPPORTED_TYPES = ["totp", "webauthn", "recovery_codes"]
MFA_PASSKEY_LOGIN_ENABLED = True
MFA_TOTP_ISSUER = setting("MFA_TOTP_ISSUER", "str", "Cardmix", "the name authenticator apps show")
# WebAuthn wants https; http://localhost is a secure context too, so development and the tests may allow it.
MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN = setting("MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN", "bool", DEBUG,
                                             "passkeys over plain http (development)",
                                             doc_default="on only with `DEBUG`")

# --- SSO: OpenID Connect --------------------------------------------------------------------------------------------
# Identity providers as JSON, or as Social applications (provider "openid_connect") in the admin. The IdP vouches for
# the email: the account is created verified.
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {
    "OAUTH_PKCE_ENABLED": True,
    "APPS": [{"provider_id": p["id"], "name": p.get("name", p["id"]), "client_id": p["client_id"],
              "secret": p.get("secret", ""), "settings": {"server_url": p["server_url"]}}
             for p in setting(
                 "OIDC_PROVIDERS", "json", [],
                 "SSO: OpenID Connect identity providers as a JSON array, `[{\"id\": \"tsinghua\", \"name\": "
                 "\"Tsinghua University\", \"server_url\": \"https://id.example.edu.cn\", \"client_id\": \"…\", "
                 "\"secret\": \"…\"}]` (or Social applications of provider `openid_connect` in the admin; add their "
                 "origins to `SSO_FORM_ACTION_ORIGINS`). The provider's redirect URI is "
                 "`SITE_URL/accounts/oidc/<id>/login/callback/`")],
}}
SSO_FORM_ACTION_ORIGINS = setting("SSO_FORM_ACTION_ORIGINS", "list", [],
                                  "origins of identity providers added in the admin, comma-separated (the console's "
                                  "Content-Security-Policy lets sign-in forms post to them)")
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_EMAIL_REQUIRED = True
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_STORE_TOKENS = False
# An IdP's verified email signs in to an existing password account of that address only when the operator says
# every configured IdP is trusted to vouch for its addresses.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = setting("SSO_EMAIL_AUTHENTICATION", "bool", False,
                                             "whether an IdP's verified address signs in to an existing password "
                                             "account of that address (only when every configured IdP is trusted "
                                             "for its addresses)")
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = SOCIALACCOUNT_EMAIL_AUTHENTICATION
