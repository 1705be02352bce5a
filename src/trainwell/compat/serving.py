"""LitServe's shutdown, for the server of deploy/serve.py.

litserve 0.2.19: `LitServer.__init__` sets `uvicorn_graceful_timeout = 30` and takes no argument
for it. On shutdown each HTTP process gets that long to finish its requests in flight before it
is killed, so a server told to stop waits up to 30 s on a stuck request: past the 10 s within
which deploy/serve.py promises to exit, and as long as Kubernetes' whole default grace period
before its SIGKILL, which kills children without a join. The attribute is public in name but not in LitServer's signature; tests/test_compat.py fails if it
disappears or stops reaching uvicorn (then pass the new argument instead).
"""

from __future__ import annotations

from typing import Any


def set_litserve_drain_timeout(server: Any, seconds: float) -> None:
    """How long `server`'s HTTP processes may finish requests in flight once told to stop."""
    if not hasattr(server, "uvicorn_graceful_timeout"):
        raise AttributeError(
            "litserve.LitServer has no uvicorn_graceful_timeout: the drain timeout of "
            "trainwell.compat.serving needs updating for this litserve version"
        )
    server.uvicorn_graceful_timeout = float(seconds)
