"""The inference worker's batch gathering (deploy/batching.py), on a plain queue in-process: a lone
request is not held for the batch window, requests already queued go in one batch, and LitServe's
shutdown sentinel still ends the loop."""

import queue
import threading
import time
from types import SimpleNamespace

import pytest

from trainwell.deploy.batching import GreedyBatchLoop

pytestmark = pytest.mark.engine  # needs nothing of the examples

WINDOW = 10.0  # a window no answer may wait for: a lone request must not


def _api(batch_timeout: float) -> SimpleNamespace:
    return SimpleNamespace(
        max_batch_size=4, batch_timeout=batch_timeout, request_timeout=30.0, spec=None
    )


def _request(uid: str, waited: float = 0.0) -> tuple:
    return (0, uid, time.monotonic() - waited, {"x": uid})


class _OneRequest(queue.Queue):
    """A queue that must not be asked again after its one request."""

    def get_nowait(self):
        raise AssertionError("the queue was asked again for a request that found the worker idle")


def test_a_request_that_finds_the_worker_idle_runs_at_once_without_asking_for_more() -> None:
    requests = _OneRequest()
    requests.put(_request("idle"))
    payloads, late = GreedyBatchLoop().get_batch_requests(_api(WINDOW), requests, None)
    assert payloads == [(0, "idle", {"x": "idle"})] and late == []


def test_a_lone_request_runs_at_once_and_queued_ones_go_together() -> None:
    # Requests here waited 0.1 s in the queue (the worker was busy): it looks for more.
    loop, requests = GreedyBatchLoop(), queue.Queue()
    requests.put(_request("alone", waited=0.1))
    start = time.monotonic()
    payloads, late = loop.get_batch_requests(_api(WINDOW), requests, None)
    assert time.monotonic() - start < WINDOW / 2  # not held for the window
    assert payloads == [(0, "alone", {"x": "alone"})] and late == []

    for i in range(6):
        requests.put(_request(f"r{i}", waited=0.1))
    payloads, _ = loop.get_batch_requests(_api(WINDOW), requests, None)
    assert [uid for _, uid, _ in payloads] == ["r0", "r1", "r2", "r3"]  # full: no wait either
    payloads, _ = loop.get_batch_requests(_api(0.05), requests, None)
    assert [uid for _, uid, _ in payloads] == ["r4", "r5"]


def test_the_shutdown_sentinel_ends_the_loop() -> None:
    loop, requests = GreedyBatchLoop(), queue.Queue()
    requests.put((None, None, None, None))  # what LitServe sends its workers on shutdown
    worker = threading.Thread(
        target=loop.run_batched_loop, args=(_api(0.05), requests, None, None), daemon=True
    )
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive()
