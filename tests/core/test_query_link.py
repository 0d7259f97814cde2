"""core.pagination.query_link: the list envelope's next/previous links in one parse, exactly as DRF's
replace_query_param and remove_query_param write them one parameter at a time."""
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.utils.urls import remove_query_param, replace_query_param

from core.pagination import query_link

_KEYS = st.sampled_from(["limit", "offset", "cursor", "state", "q", "a b", "x&y", "ü"])
_VALUES = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)


def _drf(url, changes):
    for key, value in changes.items():
        url = remove_query_param(url, key) if value is None else replace_query_param(url, key, value)
    return url


@given(query=st.lists(st.tuples(_KEYS, _VALUES), max_size=6),
       changes=st.dictionaries(_KEYS, st.none() | st.integers(0, 10**6) | _VALUES, min_size=1, max_size=3),
       raw=st.sampled_from(["", "&&", "=&x", "%zz", "a=1;b=2", "+%2B"]))
def test_one_parse_writes_drfs_links(query, changes, raw):
    from urllib.parse import urlencode

    url = f"http://testserver/api/v1/instances/?{urlencode(query)}{'&' if query and raw else ''}{raw}"
    assert query_link(url, changes) == _drf(url, changes)


def test_an_offset_page_links_both_ways():
    url = "http://testserver/api/v1/instances/?state=running&offset=150&limit=100"
    assert query_link(url, {"limit": 100, "offset": 250}) == (
        "http://testserver/api/v1/instances/?limit=100&offset=250&state=running")
    assert query_link(url, {"limit": 100, "offset": None}) == (
        "http://testserver/api/v1/instances/?limit=100&state=running")
