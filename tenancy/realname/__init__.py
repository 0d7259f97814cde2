"""Real-name verification (实名认证): submission, the operator's review, the provider hook and the policy that limits
an unverified organization. Models in tenancy/models_realname.py."""
