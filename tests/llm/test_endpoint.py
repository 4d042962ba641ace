"""An endpoint (lazymem/llm/endpoint.py): a server someone else runs, with nothing to start or stop."""

from __future__ import annotations

from lazymem.llm.endpoint import Endpoint


def test_endpoint_has_no_process():
    with Endpoint("https://api.example.com/v1/", "judge") as e:
        assert e.base_url == "https://api.example.com/v1" and e.served_name == "judge"
