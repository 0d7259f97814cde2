"""Organizations' private images (CustomImage): register by reference (checked against its registry first), delete,
and the rows "Save as image" writes (provisioning starts the save; the node commits and pushes).

Pull credentials are Fernet-sealed with IMAGE_CREDENTIALS_KEY (derived from SECRET_KEY outside production, required
in production) and never shown again. They leave the platform only inside the agent command that pulls the image:
the command row keeps the sealed text (`pull_auth`), and the agent API unseals it as it hands the command to its
node (`pull_auth_unseal`, called from hardware's command serializer).
"""
import re
from datetime import timedelta

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext

from core.dbclock import db_now
from core.errors import InvalidState, ValidationFailed
from core.fernet_keys import fernet_for
from tenancy.audit import audit_record

from .choices import VENDOR_ARCHITECTURE, CustomImageOrigin, CustomImageState, Vendor
from .hooks import custom_image_deleted
from .models import CustomImage
from .registry import DOCKER_HUB, RegistryError, manifest_check, reference_parse

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")  # also a registry path component and a tag
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _fernet() -> Fernet:
    return fernet_for(key=settings.IMAGE_CREDENTIALS_KEY, setting="IMAGE_CREDENTIALS_KEY", purpose="image-pull")


def secret_seal(secret: str) -> bytes:
    return _fernet().encrypt(secret.encode())


def secret_unseal(sealed) -> str:
    """The password or token; ValueError when IMAGE_CREDENTIALS_KEY does not open it (never logs the data)."""
    try:
        return _fernet().decrypt(bytes(sealed)).decode()
    except InvalidToken:
        raise ValueError("An image pull credential cannot be decrypted with the configured "
                         "IMAGE_CREDENTIALS_KEY") from None


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, details={field: [message]})


def _login(image: CustomImage) -> tuple[str, str]:
    """(username, password) the nodes and the platform use for the image: a saved image's are the operator's
    (IMAGE_SAVE_REGISTRY_*, as configured now), a registered one's its own."""
    if image.origin == CustomImageOrigin.SAVED:
        return settings.IMAGE_SAVE_REGISTRY_USERNAME, settings.IMAGE_SAVE_REGISTRY_PASSWORD
    return image.username, secret_unseal(image.password_encrypted) if image.password_encrypted else ""


def pull_reference(image: CustomImage) -> str:
    """What the node pulls and runs: the reference pinned to the digest checked at registration, so a tag moved
    since runs nothing unchecked (`repo:tag@sha256:…`, which docker pulls by digest)."""
    ref = reference_parse(image.reference)
    # Docker Hub as docker names it: its credentials are filed under docker.io, never under the API's host.
    text = f"docker.io/{str(ref).split('/', 1)[1]}" if ref.host == DOCKER_HUB else str(ref)
    if not image.digest or ref.reference.startswith("sha256:"):
        return text
    return f"{text}@{image.digest}"


def _registry_host(reference: str) -> str:
    host = reference_parse(reference).host
    return "docker.io" if host == DOCKER_HUB else host


def pull_auth(image: CustomImage) -> dict | None:
    """What an agent command carries to pull the image: {"registry": host, "username": …, "sealed": Fernet text of
    the password} — sealed in the command row; None for an image its registry serves without a login."""
    username, password = _login(image)
    if not username and not password:
        return None
    return {"registry": _registry_host(image.reference), "username": username,
            "sealed": secret_seal(password).decode()}


def push_auth(reference: str) -> dict | None:
    """The operator's login to IMAGE_SAVE_REGISTRY, as an agent command carries it (sealed), or None without one."""
    username, password = settings.IMAGE_SAVE_REGISTRY_USERNAME, settings.IMAGE_SAVE_REGISTRY_PASSWORD
    if not username and not password:
        return None
    return {"registry": _registry_host(reference), "username": username, "sealed": secret_seal(password).decode()}


def pull_auth_unseal(auth) -> dict:
    """{"registry", "username", "password"} for the node, from pull_auth's sealed form (the agent API calls this as
    it hands a command out); anything else is passed on as it is."""
    if not isinstance(auth, dict) or "sealed" not in auth:
        return auth
    opened = {k: v for k, v in auth.items() if k != "sealed"}
    opened["password"] = secret_unseal(auth["sealed"].encode())
    return opened


def _vendors_check(vendors) -> list[str]:
    if not isinstance(vendors, list) or not vendors or any(v not in Vendor.values for v in vendors):
        raise _invalid("vendors", gettext("One or more of %(vendors)s.") % {"vendors": ", ".join(Vendor.values)})
    return sorted(set(vendors))


def _architectures_check(reference: str, archs, vendors: list[str]) -> None:
    missing = sorted({VENDOR_ARCHITECTURE[v] for v in vendors} - set(archs))
    if missing:
        raise _invalid("reference", gettext("%(reference)s is built for %(archs)s, not %(missing)s (the nodes of "
                                               "%(vendors)s accelerators).")
                       % {"reference": reference, "archs": ", ".join(archs) or gettext("no named architecture"),
                          "missing": ", ".join(missing), "vendors": ", ".join(vendors)})


def custom_image_register(*, org, name: str, reference: str, vendors=None, username: str = "", password: str = "",
                          actor=None, request=None) -> CustomImage:
    """Check `reference` against its registry with the login given (400 naming `reference` when it does not exist
    or is not built for the vendors' nodes, `credentials` when the registry refuses the login) and keep it with its
    digest; the password (or token) sealed. Audited, never with the secret."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _invalid("name", gettext("Lower-case letters, digits, dots, hyphens and underscores, 1–64 "
                                       "characters, starting and ending with a letter or digit."))
    vendors = _vendors_check(vendors if vendors is not None else [Vendor.NVIDIA])
    username, password = (username or "").strip(), password or ""
    if password and not username:
        raise _invalid("username", gettext("Give the username that goes with the password or token."))
    if CustomImage.objects.filter(organization=org, name=name).exists():
        raise _invalid("name", gettext("An image named %(name)s exists already.") % {"name": repr(name)})
    try:
        info = manifest_check(reference, username=username, password=password)
    except RegistryError as exc:
        raise _invalid(exc.field, exc.message) from None
    _architectures_check(reference, info.architectures, vendors)
    with transaction.atomic():
        try:
            with transaction.atomic():
                image = CustomImage.objects.create(
                    organization=org, creator=actor if getattr(actor, "pk", None) else None, name=name,
                    reference=reference.strip(), digest=info.digest, architectures=list(info.architectures),
                    vendors=vendors, username=username, size_bytes=info.size_bytes,
                    password_encrypted=secret_seal(password) if password else None)
        except IntegrityError as exc:  # a concurrent register took the name
            raise _invalid("name", gettext("An image named %(name)s exists already.") % {"name": repr(name)}) from exc
        audit_record(action="custom_image.register", org=org, actor=actor, target=image, request=request,
                     details={"name": name, "reference": image.reference, "digest": info.digest,
                              "architectures": list(info.architectures), "vendors": vendors,
                              "credentials": bool(username or password)})
    return image


def custom_image_delete(*, org, image_id, actor=None, request=None) -> None:
    """Forget the image (a running instance keeps its container; a saved image stops being billed: the
    custom_image_deleted listeners close its meter). The registry keeps its copy: the operator prunes its own."""
    with transaction.atomic():
        image = CustomImage.objects.select_for_update().filter(organization=org, pk=image_id).first()
        if image is None:
            return
        # A save past its time limit lost its worker (the node's answer never came): it may go.
        stuck_after = timedelta(seconds=settings.IMAGE_SAVE_TIMEOUT_SECONDS + 600)
        if image.state == CustomImageState.SAVING and image.created_at > db_now() - stuck_after:
            raise InvalidState(gettext("The image is being saved; delete it once it is ready or has failed."))
        details = {"name": image.name, "reference": image.reference, "origin": image.origin}
        audit_record(action="custom_image.delete", org=org, actor=actor, target=image, request=request,
                     details=details)
        custom_image_deleted(image_id=image.pk)
        image.delete()


def save_reference(*, org, name: str, tag: str) -> str:
    """Where a saved container goes: <IMAGE_SAVE_REGISTRY>/<organization slug>/<name>:<tag>."""
    return f"{settings.IMAGE_SAVE_REGISTRY}/{org.slug.lower()}/{name}:{tag}"


def custom_image_save_start(*, org, name: str, tag: str, vendors: list[str], zone_id, source_instance_id,
                            actor=None, request=None) -> CustomImage:
    """The row of an image being saved from a container (state saving); the caller holds the instance and queues
    the node's commit + push. 400 naming `name` / `tag`; 409 when no registry is configured."""
    if not settings.IMAGE_SAVE_REGISTRY:
        raise InvalidState(gettext("Saving images is not set up on this platform (IMAGE_SAVE_REGISTRY is empty)."))
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _invalid("name", gettext("Lower-case letters, digits, dots, hyphens and underscores, 1–64 "
                                       "characters, starting and ending with a letter or digit."))
    tag = tag or "latest"
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise _invalid("tag", gettext("Letters, digits, dots, hyphens and underscores, at most 128 characters."))
    reference = save_reference(org=org, name=name, tag=tag)
    try:
        reference_parse(reference)
    except RegistryError as exc:
        raise _invalid("name", exc.message) from None
    try:
        with transaction.atomic():
            image = CustomImage.objects.create(
                organization=org, creator=actor if getattr(actor, "pk", None) else None, name=name,
                reference=reference, vendors=sorted(set(vendors)), origin=CustomImageOrigin.SAVED,
                state=CustomImageState.SAVING, source_instance_id=source_instance_id, zone_id=zone_id)
    except IntegrityError as exc:
        raise _invalid("name", gettext("An image named %(name)s exists already.") % {"name": repr(name)}) from exc
    audit_record(action="custom_image.save", org=org, actor=actor, target=image, request=request,
                 details={"name": name, "reference": reference, "instance": str(source_instance_id)})
    return image


def custom_image_save_finish(*, image_id, pushed: bool, output: str = "") -> CustomImage | None:
    """After the node's commit + push: read the pushed image back from the registry (digest, architectures, size)
    → ready; or failed with why. None when the row is gone (deleted meanwhile)."""
    image = CustomImage.objects.filter(pk=image_id).first()
    if image is None or image.state != CustomImageState.SAVING:
        return image
    reason, info = "", None
    if not pushed:
        reason = gettext("The node could not save the container: %(output)s") % {"output": output.strip()[-800:]}
    else:
        username, password = _login(image)
        try:
            info = manifest_check(image.reference, username=username, password=password)
        except RegistryError as exc:
            reason = gettext("The pushed image cannot be read back from the registry: %(error)s") % {"error": exc.message}
    with transaction.atomic():
        locked = CustomImage.objects.select_for_update().filter(pk=image_id, state=CustomImageState.SAVING).first()
        if locked is None:
            return CustomImage.objects.filter(pk=image_id).first()
        if info is None:
            locked.state, locked.state_reason = CustomImageState.FAILED, reason[:1000]
        else:
            locked.state, locked.digest = CustomImageState.READY, info.digest
            locked.architectures, locked.size_bytes = list(info.architectures), info.size_bytes or 0
        locked.save(update_fields=["state", "state_reason", "digest", "architectures", "size_bytes"])
        audit_record(action="custom_image.saved" if info else "custom_image.save_failed",
                     org=locked.organization_id and locked.organization, target=locked,
                     details={"name": locked.name, "digest": locked.digest, "size_bytes": locked.size_bytes,
                              **({"reason": locked.state_reason} if not info else {})})
    return locked
