"""The catalog of SPEC §1 (accelerators, list prices, images) as data, seeded by migration 0002.

`seed_catalog()` upserts by slug and only adds a price when the accelerator has none, so it is safe
to call again (the demo fleet and the test factories do, e.g. after a transactional test flushed
the tables).
"""
from datetime import UTC, datetime

# The first price's effective-from time: before any instance can exist.
CATALOG_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)

# slug, name, vendor, domestic, memory GB, collective, readiness floor GB/s, list µCNY/card-hour,
# monthly µCNY/card-hour (None → floor(list × MONTHLY_DISCOUNT) where read), orderable.
ACCELERATORS = [
    ("h100-sxm-80g", "NVIDIA H100 SXM 80GB", "nvidia", False, 80, "nccl", 235, 1_900_000, 1_235_000, True),
    ("h800-sxm-80g", "NVIDIA H800 SXM 80GB", "nvidia", False, 80, "nccl", 150, 6_800_000, None, True),
    ("a800-sxm-80g", "NVIDIA A800 SXM 80GB", "nvidia", False, 80, "nccl", 150, 2_000_000, None, True),
    ("ascend-910b", "Huawei Ascend 910B", "huawei", True, 64, "hccl", 100, 2_400_000, None, True),
    ("mtt-s4000", "Moore Threads MTT S4000", "moore_threads", True, 48, "mccl", None, None, None, False),
    ("bi-v100", "Iluvatar CoreX BI-V100", "iluvatar", True, 32, "ixccl", None, None, None, False),
]

IMAGES = [
    ("pytorch-2.3-cuda12.3", "PyTorch 2.3 · CUDA 12.3",
     "PyTorch 2.3 on CUDA 12.3 with NCCL 2.21, Ubuntu 22.04, Python 3.11.", ["nvidia"]),
    ("deepspeed", "DeepSpeed", "DeepSpeed 0.14 on PyTorch 2.3 / CUDA 12.3 / NCCL 2.21.", ["nvidia"]),
    ("megatron-lm", "Megatron-LM", "NVIDIA Megatron-LM core on PyTorch 2.3 / CUDA 12.3 / NCCL 2.21.", ["nvidia"]),
    ("llama-factory", "LLaMA-Factory", "LLaMA-Factory fine-tuning on PyTorch 2.3 / CUDA 12.3.", ["nvidia"]),
    ("cann-torch-npu", "CANN · torch_npu",
     "Huawei CANN 8.0 with PyTorch 2.3 and torch_npu; HCCL for collectives.", ["huawei"]),
]

# Every catalog image ships JupyterLab (started with the platform's token on JUPYTER_PORT, under the proxy's
# prefix) and TensorBoard.
JUPYTER_PORT = 8888
IMAGE_HTTP_PORTS = [{"port": JUPYTER_PORT, "name": "JupyterLab"}, {"port": 6006, "name": "TensorBoard"}]


def seed_catalog(apps=None) -> None:
    """Upsert the SPEC §1 accelerators, their first price and the images (idempotent)."""
    if apps is None:
        from django.apps import apps as live_apps

        apps = live_apps
    Accelerator = apps.get_model("inventory", "Accelerator")
    Price = apps.get_model("inventory", "Price")
    Image = apps.get_model("inventory", "Image")
    for slug, name, vendor, domestic, mem, coll, floor, od, monthly, orderable in ACCELERATORS:
        acc, _ = Accelerator.objects.update_or_create(
            slug=slug,
            defaults=dict(name=name, vendor=vendor, domestic=domestic, memory_gb=mem, collective=coll,
                          readiness_floor_gbps=floor, orderable=orderable),
        )
        if od is not None and not Price.objects.filter(accelerator=acc).exists():
            Price.objects.create(accelerator=acc, on_demand_per_card_hour=od, monthly_per_card_hour=monthly,
                                 effective_from=CATALOG_EPOCH)
    # Migration 0002's historical Image predates the ports (0008 adds them to the rows it made).
    ports = (dict(http_ports=IMAGE_HTTP_PORTS, jupyter_port=JUPYTER_PORT)
             if any(f.name == "jupyter_port" for f in Image._meta.get_fields()) else {})
    for slug, name, description, vendors in IMAGES:
        Image.objects.update_or_create(slug=slug, defaults=dict(name=name, description=description,
                                                                vendors=vendors, active=True, **ports))
