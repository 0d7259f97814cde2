"""The SDK's models are the schema's components: a field added or dropped on either side fails here."""
import pytest
from cardmix.models import ALL_MODELS
from drf_spectacular.generators import SchemaGenerator

pytestmark = [pytest.mark.django_db]


@pytest.fixture(scope="module")
def components():
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.SCHEMA)
def test_model_fields_are_the_schema_properties(model, components):
    assert model.SCHEMA in components, f"the schema has no component {model.SCHEMA}"
    schema = set(components[model.SCHEMA]["properties"])
    sdk = model.api_fields()
    assert sdk == schema, f"only in the SDK: {sorted(sdk - schema)}; only in the schema: {sorted(schema - sdk)}"


def test_the_create_body_fields_the_sdk_sends_are_in_the_schema(components):
    """The CLI's create body (items, kind, image, zone, volumes, datasets, ssh_key_ids, waitlist) must be fields
    the API declares; `volumes` and `datasets` only once the storage API declares them."""
    declared = set(components["InstanceCreateRequest"]["properties"])
    for field in ("name", "items", "kind", "image", "zone", "ssh_key_ids", "waitlist"):
        assert field in declared, field
    assert set(components["ItemRequest"]["properties"]) >= {"accelerator", "count"}
