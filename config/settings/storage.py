"""Storage: volumes, their retention, the zones' storage roots on the nodes, and S3 object access (SPEC §8)."""
from core.settings_registry import section, setting

section("Storage", "Volumes (disk and shared), the storage root every node of a zone mounts, and S3 object access "
        "to shared volumes (SPEC §8).")

# Days an organization that cannot pay keeps its volumes (still accruing) before they are deleted; owners are
# warned by email and banner 7 days and 1 day before.
VOLUME_RETENTION_DAYS = setting("VOLUME_RETENTION_DAYS", "int", 30,
                                "days an organization that cannot pay keeps its volumes (still accruing) before they "
                                "are deleted; owners are warned 7 days and 1 day before")
VOLUME_MAX_GIB = setting("VOLUME_MAX_GIB", "int", 102400, "the largest volume, GiB (100 TiB)")
# The zone's storage root (NFS, CephFS, JuiceFS, Lustre) as every node of the zone mounts it: volumes/<id> and
# datasets/<slug> under it.
STORAGE_ROOT = setting("STORAGE_ROOT", "str", "/mnt/cardmix-storage",
                       "the zone's storage (NFS, CephFS, JuiceFS, Lustre) as every node of the zone mounts it: "
                       "`volumes/<id>` and `datasets/<slug>` under it")
STORAGE_ROOTS = setting("STORAGE_ROOTS", "json", {},
                        "`STORAGE_ROOT` per zone slug, a JSON object: `{\"cn-north-1\": \"/mnt/cn1\"}`")
# The S3-compatible endpoint of shared volumes (MinIO, Ceph RGW, a cloud's): one bucket per volume, made with the
# operator's credentials below, and one IAM user per access key limited to its bucket. Empty: no object access.
S3_ENDPOINT_URL = setting("S3_ENDPOINT_URL", "url", "",
                          "the S3-compatible endpoint of shared volumes (MinIO, Ceph RGW, a cloud's): one bucket per "
                          "volume, one IAM user per access key limited to its bucket; empty: no object access")
S3_REGION = setting("S3_REGION", "str", "us-east-1", "the endpoint's region")
S3_ADMIN_ACCESS_KEY_ID = setting("S3_ADMIN_ACCESS_KEY_ID", "str", "",
                                 "the operator's access key that makes buckets and IAM users")
S3_ADMIN_SECRET_ACCESS_KEY = setting("S3_ADMIN_SECRET_ACCESS_KEY", "str", "", "its secret")
S3_BUCKET_PREFIX = setting("S3_BUCKET_PREFIX", "str", "cardmix-", "prefix of the volumes' bucket names")
S3_KEYS_PER_VOLUME = setting("S3_KEYS_PER_VOLUME", "int", 10, "access keys a volume may have at once")
