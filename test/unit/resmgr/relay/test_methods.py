"""The CRI v1 method table."""

from __future__ import annotations

from resmgr.relay.hooks import INTERCEPTED_METHODS
from resmgr.relay.methods import IMAGE_SERVICE, RUNTIME_SERVICE, cri_methods, short_name, split_path


def test_method_table_covers_cri_and_intercepted_methods():
    table = cri_methods()
    for name in INTERCEPTED_METHODS:
        method = table[f"/{RUNTIME_SERVICE}/{name}"]
        assert not method.server_streaming and not method.client_streaming
    assert table[f"/{RUNTIME_SERVICE}/GetContainerEvents"].server_streaming
    assert f"/{IMAGE_SERVICE}/PullImage" in table
    assert short_name(f"/{IMAGE_SERVICE}/PullImage") == "PullImage"
    assert short_name("/foo.Bar/Baz") == "/foo.Bar/Baz"
    assert split_path("garbage") == ("", "garbage")
