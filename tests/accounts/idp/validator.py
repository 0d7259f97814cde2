from oauth2_provider.oauth2_validators import OAuth2Validator


class Validator(OAuth2Validator):
    """The claims a university IdP sends: a verified email and the person's name."""

    oidc_claim_scope = None  # every claim, whatever the scopes

    def get_additional_claims(self, request):
        return {"email": request.user.email, "email_verified": True, "name": request.user.first_name}
