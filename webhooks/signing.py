"""Standard Webhooks signatures (https://www.standardwebhooks.com): one `v1,…` per live secret."""
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook


def headers_sign(*, msg_id: str, body: str, secrets: list[str], at: datetime) -> dict[str, str]:
    """The three webhook-* headers for `body`, signed at `at` with every secret (rotation overlap)."""
    at = at.astimezone(UTC)
    signatures = " ".join(Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=body) for secret in secrets)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signatures}
