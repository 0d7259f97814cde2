"""The placement engine words its refusals in English and imports no Django; the API gives them in the request's
language (services/specs.placement_message), the same English as before for English requests, with the "item <n>: "
prefix untranslated (callers and the console match it)."""
import pytest

from tests.factories.provisioning import container_body, funded, make_fleet

pytestmark = pytest.mark.django_db
URL = "/api/v1/instances/"


@pytest.fixture
def client(member_factory, session_client_for):
    return session_client_for(funded(member_factory(role="owner")))


def _details(response) -> dict:
    return response.json()["error"]["details"]


def test_an_invalid_item_reads_in_the_requests_language(client):
    make_fleet(h100=1)
    too_many = container_body(count=9)
    english = client.post(URL, too_many, format="json")
    chinese = client.post(URL, too_many, format="json", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert english.status_code == chinese.status_code == 400
    assert _details(english)["items"] == ["item 0: a container holds at most 8 cards, got 9"]
    assert _details(chinese)["items"] == ["item 0: 一个容器最多 8 张卡，请求的是 9 张"]
    unknown = container_body(accelerator_slug="no-such-card")
    assert _details(client.post(URL, unknown, format="json", HTTP_ACCEPT_LANGUAGE="zh-CN"))["items"] == [
        "item 0: 'no-such-card' 不是可订购的加速卡。"]


def test_an_image_refusal_reads_in_the_requests_language(client):
    make_fleet(h100=1)
    body = container_body(image="no-such-image")
    assert _details(client.post(URL, body, format="json"))["image"] == ["Unknown image 'no-such-image'."]
    assert _details(client.post(URL, body, format="json", HTTP_ACCEPT_LANGUAGE="zh-CN"))["image"] == [
        "未知的镜像 'no-such-image'。"]


def test_a_capacity_shortfall_reads_in_the_requests_language(client):
    make_fleet(h800=1)  # no H100 node at all
    english = client.post(URL, container_body(count=2), format="json")
    chinese = client.post(URL, container_body(count=2), format="json", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert english.status_code == chinese.status_code == 409
    assert english.json()["error"]["message"] == "not enough free capacity: h100-sxm-80g short by 2"
    assert chinese.json()["error"]["message"] == "空闲容量不足：h100-sxm-80g 缺 2 张"
