"""Validation of new nodes and parsing of the operators' node CSV (all rows checked before any write)."""
import csv
import io
import re

from django.utils.translation import gettext

from core.errors import ValidationFailed

from . import hooks
from .choices import NodeState
from .models import Accelerator, Node, Zone

DRIVERS = ("simulated", "redfish", "agent")
MAX_CARDS_PER_NODE = 64
MAX_ROWS = 5000
CSV_REQUIRED = ("hostname", "zone", "accelerator")
CSV_OPTIONAL = ("card_count", "driver", "ssh_host", "ssh_port", "bmc_address", "bmc_credentials_ref", "state")
# A new node starts available, or parked until an operator releases it.
IMPORT_STATES = (NodeState.AVAILABLE, NodeState.MAINTENANCE)
_HOSTNAME = re.compile(r"^(?=.{1,200}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def _int(value, field, errors, *, lo, hi):
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        errors.setdefault(field, []).append("Enter a whole number.")
        return None
    if not lo <= number <= hi:
        errors.setdefault(field, []).append(f"Must be between {lo} and {hi}.")
        return None
    return number


def bmc_credentials_ref_errors(ref, *, missing=None) -> list[str]:
    """Why `ref` cannot be a node's bmc_credentials_ref (empty: it names a BMC credential, or is empty);
    `missing`: the already looked-up names that name none."""
    missing = hooks.bmc_credentials_missing([ref]) if missing is None else missing
    if ref and ref in missing:
        return [f"No BMC credential named {ref!r}; add it under Hardware → BMC credentials first "
                "(the node's power and boot calls log in with it)."]
    return []


def validate_node_fields(*, hostname, zone, accelerator, card_count, driver="simulated", ssh_port=22,
                         bmc_credentials_ref="", taken_hostnames=None, missing_bmc_refs=None) -> dict:
    """{field: [messages]} for a node about to be created (zone/accelerator None = unknown)."""
    errors: dict[str, list[str]] = {}
    if not hostname or not _HOSTNAME.match(hostname):
        errors["hostname"] = ["Enter a valid hostname (letters, digits, hyphens and dots)."]
    elif (hostname in taken_hostnames) if taken_hostnames is not None else Node.objects.filter(hostname=hostname).exists():
        errors["hostname"] = [f"A node named {hostname} already exists."]
    if zone is None:
        errors["zone"] = ["Unknown zone."]
    if accelerator is None:
        errors["accelerator"] = ["Unknown accelerator."]
    _int(card_count, "card_count", errors, lo=1, hi=MAX_CARDS_PER_NODE)
    if driver not in DRIVERS:
        errors["driver"] = [f"Choose one of {', '.join(DRIVERS)}."]
    _int(ssh_port, "ssh_port", errors, lo=1, hi=65535)
    if bmc_errors := bmc_credentials_ref_errors(bmc_credentials_ref, missing=missing_bmc_refs):
        errors["bmc_credentials_ref"] = bmc_errors
    return errors


def _read_text(file) -> str:
    data = file.read() if hasattr(file, "read") else file
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValidationFailed(gettext("The file is not UTF-8 text."), details={"file": [gettext("Save the CSV as UTF-8.")]}) from exc
    return data


def parse_nodes_csv(file) -> list[dict]:
    """Rows of node_create keyword arguments; raises ValidationFailed with `row N: field` keys on any error."""
    reader = csv.DictReader(io.StringIO(_read_text(file)))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in CSV_REQUIRED if c not in header]
    unknown = [c for c in header if c not in CSV_REQUIRED + CSV_OPTIONAL]
    if missing or unknown:
        details = {"header": [f"Missing column {c}." for c in missing] + [f"Unknown column {c}." for c in unknown]}
        raise ValidationFailed(gettext('Row 1 (header): %(join)s') % {'join': '; '.join(details['header'])}, details=details)
    reader.fieldnames = header
    zones = {z.slug: z for z in Zone.objects.all()}
    accelerators = {a.slug: a for a in Accelerator.objects.all()}
    taken = set(Node.objects.values_list("hostname", flat=True))
    raws = list(reader)
    # One lookup for the file's BMC credential names (they must exist before the nodes that log in with them).
    missing_bmc = hooks.bmc_credentials_missing({(raw.get("bmc_credentials_ref") or "").strip()
                                                 for raw in raws[:MAX_ROWS]})
    rows, errors = [], {}
    for number, raw in enumerate(raws, start=2):  # spreadsheet numbering: the header is row 1
        if number - 1 > MAX_ROWS:
            raise ValidationFailed(gettext('At most %(MAX_ROWS)s rows per file.') % {'MAX_ROWS': MAX_ROWS}, details={"file": [gettext('At most %(MAX_ROWS)s rows.') % {'MAX_ROWS': MAX_ROWS}]})
        if None in raw:
            errors[f"row {number}: columns"] = ["More values than header columns."]
            continue
        cell = {k: (v or "").strip() for k, v in raw.items()}
        if not any(cell.values()):
            continue  # blank line
        row = {
            "hostname": cell["hostname"].lower(),
            "zone": zones.get(cell["zone"]),
            "accelerator": accelerators.get(cell["accelerator"]),
            "card_count": cell.get("card_count") or "8",
            "driver": cell.get("driver") or "simulated",
            "ssh_host": cell.get("ssh_host", ""),
            "ssh_port": cell.get("ssh_port") or "22",
            "bmc_address": cell.get("bmc_address", ""),
            "bmc_credentials_ref": cell.get("bmc_credentials_ref", ""),
            "state": cell.get("state") or NodeState.AVAILABLE,
        }
        field_errors = validate_node_fields(taken_hostnames=taken, missing_bmc_refs=missing_bmc, **{k: row[k] for k in (
            "hostname", "zone", "accelerator", "card_count", "driver", "ssh_port", "bmc_credentials_ref")})
        if row["zone"] is None and cell["zone"]:
            field_errors["zone"] = [f"Unknown zone {cell['zone']!r}."]
        if row["accelerator"] is None and cell["accelerator"]:
            field_errors["accelerator"] = [f"Unknown accelerator {cell['accelerator']!r}."]
        if row["state"] not in IMPORT_STATES:
            field_errors["state"] = [f"Choose one of {', '.join(IMPORT_STATES)}."]
        for field, messages in field_errors.items():
            errors[f"row {number}: {field}"] = messages
        if not field_errors:
            taken.add(row["hostname"])  # a hostname twice in one file is an error on its second row
            row["card_count"], row["ssh_port"] = int(row["card_count"]), int(row["ssh_port"])
            rows.append(row)
    if errors:
        first = next(iter(errors))
        raise ValidationFailed(gettext('Nothing was imported: %(len)s error(s); first: %(first)s: %(errors)s') % {'len': len(errors), 'first': first, 'errors': errors[first][0]},
                               details=errors)
    if not rows:
        raise ValidationFailed(gettext("The file has no rows."), details={"file": [gettext("No nodes in the file.")]})
    return rows
