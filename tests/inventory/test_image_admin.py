"""Operators can edit the seeded images in the admin, dotted slugs included."""
import pytest

from inventory.models import Image


@pytest.mark.django_db
def test_admin_saves_an_image_with_a_dotted_slug(client, member_factory, catalog):
    staff = member_factory().user
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    image = Image.objects.get(slug="pytorch-2.3-cuda12.3")
    url = f"/admin/inventory/image/{image.pk}/change/"
    response = client.post(url, {"slug": image.slug, "name": "PyTorch 2.3 (CUDA 12.3)", "description": "x",
                                 "vendors": '["nvidia"]', "active": "on"})
    assert response.status_code == 302, response.content[:2000]
    image.refresh_from_db()
    assert image.name == "PyTorch 2.3 (CUDA 12.3)"
    # The slug is fixed once created (instances name it); a new image's slug is checked.
    bad = client.post("/admin/inventory/image/add/", {"slug": "no spaces/allowed", "name": "x", "description": "",
                                                      "vendors": '["nvidia"]'})
    assert bad.status_code == 200 and b"Letters, digits, dots" in bad.content
