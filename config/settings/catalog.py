"""The catalog and the fleet's placement (SPEC §13), and images: custom images from customers' registries, and
"Save as image" to the operator's."""
from core.settings_registry import section, setting

section("Catalog, placement and images", "The catalog's stock, the placement engine's learned demand, custom "
        "images from customers' registries, and *Save as image* to the operator's registry.")

# --- Catalog and placement ------------------------------------------------------------------------------------------
# inventory/selectors.py: the catalog's stock is counted at most this long ago (0 counts on every read).
CATALOG_STOCK_CACHE_SECONDS = setting("CATALOG_STOCK_CACHE_SECONDS", "float", 5.0,
                                      "how old the catalog's stock may be (cached, shared on Redis; a committed "
                                      "change shows at the next read); 0 counts on every read")
# Each worker keeps the fleet's free cards in memory and reads only the nodes changed since its last decision
# (inventory.PlacementChange, written by triggers). How long the demand `ours` learns from is remembered (half-life
# of a request's weight, hours), and how often a worker re-reads it (seconds).
PLACEMENT_DEMAND_HALF_LIFE_HOURS = setting("PLACEMENT_DEMAND_HALF_LIFE_HOURS", "float", 24.0,
                                           "the placement's `ours` strategy learns from recent requests: a request's "
                                           "weight halves every this many hours (the waitlist counts in full)")
PLACEMENT_DEMAND_REFRESH_SECONDS = setting("PLACEMENT_DEMAND_REFRESH_SECONDS", "float", 60.0,
                                           "how often each process re-reads that demand")

# --- Custom images (inventory/registry.py, inventory/custom_images.py) ----------------------------------------------
CUSTOM_IMAGE_INSECURE_REGISTRIES = setting("CUSTOM_IMAGE_INSECURE_REGISTRIES", "list", [],
                                           "registries (`host:port`, comma-separated) asked over plain HTTP instead "
                                           "of HTTPS when a custom image is checked")
# The only registries customers may name (empty: any public one); named registries may be on internal addresses.
CUSTOM_IMAGE_REGISTRIES = setting("CUSTOM_IMAGE_REGISTRIES", "list", [],
                                  "the only registries customers may name for custom images (empty: any public "
                                  "registry); a registry the operator names here or among the insecure ones may sit "
                                  "on an internal address, any other reference is refused when its host resolves to "
                                  "a loopback, private, link-local or CGNAT address (SSRF)")
CUSTOM_IMAGE_REGISTRY_TIMEOUT_SECONDS = setting("CUSTOM_IMAGE_REGISTRY_TIMEOUT_SECONDS", "float", 15.0,
                                                "each registry call's time limit")
IMAGE_CREDENTIALS_KEY = setting("IMAGE_CREDENTIALS_KEY", "str", "",
                                "Fernet key sealing organizations' registry logins (custom images' pull passwords or "
                                "tokens) at rest; required in production",
                                doc_default="derived from `SECRET_KEY` outside production")

# --- "Save as image" ------------------------------------------------------------------------------------------------
# The operator's registry (host[:port]) that saved containers are pushed to, under
# <registry>/<organization slug>/<name>:<tag>, and the push/pull login for it (empty: a registry without auth).
IMAGE_SAVE_REGISTRY = setting("IMAGE_SAVE_REGISTRY", "str", "",
                              "*Save as image*: the operator's registry (`host[:port]`) containers are pushed to as "
                              "`<registry>/<organization slug>/<name>:<tag>`; empty: the action is refused (409). Add "
                              "it to `CUSTOM_IMAGE_INSECURE_REGISTRIES` if it speaks plain HTTP")
IMAGE_SAVE_REGISTRY_USERNAME = setting("IMAGE_SAVE_REGISTRY_USERNAME", "str", "",
                                       "its push/pull login (empty: a registry without auth)")
IMAGE_SAVE_REGISTRY_PASSWORD = setting("IMAGE_SAVE_REGISTRY_PASSWORD", "str", "", "its password")
IMAGE_SAVE_TIMEOUT_SECONDS = setting("IMAGE_SAVE_TIMEOUT_SECONDS", "float", 3600.0,
                                     "how long a node's commit + push may take")
