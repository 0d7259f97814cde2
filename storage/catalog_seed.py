"""The storage catalog the demo and a fresh install start from: prices per zone and kind, and the library.

Idempotent: a zone that has a price of a kind keeps it (an operator's change is a newer row), an entry that
exists keeps its fields and gains the zones it lacked.
"""
from django.db import transaction

from core.dbclock import db_now
from inventory.models import Zone

from .choices import DatasetKind, VolumeKind
from .models import Dataset, StoragePrice

# µCNY per GiB-hour: a disk 0.10 CNY per GiB-month (720 h), a shared volume (network filesystem) 0.18.
DEFAULT_PRICES = {VolumeKind.DISK: 140, VolumeKind.SHARED: 250}

LIBRARY = [
    {"slug": "imagenet-1k", "name": "ImageNet-1K (ILSVRC 2012)", "kind": DatasetKind.DATASET, "size_gib": 147,
     "description": "1.28 M training and 50,000 validation images in 1,000 classes, as the original tar files.",
     "licence": "ImageNet terms of access: non-commercial research and educational use only."},
    {"slug": "wudao-corpus", "name": "WuDao Corpora (open 200 GB subset)", "kind": DatasetKind.DATASET,
     "size_gib": 187, "description": "Chinese web text, cleaned and deduplicated (JSON lines).",
     "licence": "WuDaoCorpora licence (BAAI): research use; no redistribution."},
    {"slug": "llama-70b", "name": "Llama-class 70B weights (BF16)", "kind": DatasetKind.MODEL, "size_gib": 132,
     "description": "A 70B-parameter decoder in safetensors shards with its tokenizer.",
     "licence": "Llama community licence: accept it before use; acceptable-use policy applies."},
    {"slug": "llama-405b", "name": "Llama-class 405B weights (BF16)", "kind": DatasetKind.MODEL, "size_gib": 757,
     "description": "A 405B-parameter decoder in safetensors shards with its tokenizer (for 16+ cards).",
     "licence": "Llama community licence: accept it before use; acceptable-use policy applies."},
]


@transaction.atomic
def storage_catalog_seed(*, zones=None) -> dict:
    """Price every zone that has no storage price yet and put the library in every zone; returns counts."""
    zones = list(zones if zones is not None else Zone.objects.all())
    now, prices = db_now(), 0
    for zone in zones:
        for kind, per in DEFAULT_PRICES.items():
            if not StoragePrice.objects.filter(zone=zone, kind=kind).exists():
                StoragePrice.objects.create(zone=zone, kind=kind, per_gib_hour=per, effective_from=now)
                prices += 1
    entries = 0
    for row in LIBRARY:
        ds, created = Dataset.objects.get_or_create(slug=row["slug"], defaults=row)
        ds.zones.add(*zones)
        entries += created
    return {"prices": prices, "datasets": entries}
