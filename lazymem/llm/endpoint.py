"""A server someone else runs, with a managed server's interface and no process."""

from __future__ import annotations

from typing import Any


class Endpoint:
    """A server someone else runs (a hosted API, or a vLLM started by hand): no process to manage."""

    kind = "endpoint"

    def __init__(self, base_url: str, served_name: str, **_: Any):
        self.base_url, self.served_name = base_url.rstrip("/"), served_name
        self.startup_s = 0.0
        self.restarts = 0

    def start(self) -> Endpoint:
        return self

    def revive(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
