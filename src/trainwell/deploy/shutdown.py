"""How scripts/serve.py stops: a signal turned into LitServe's own drain, and no process left.

SIGTERM and SIGINT in the main process start LitServe's interrupt shutdown (drain the requests in
flight, join every child); a second signal during the drain is absorbed; after LitServe returns,
any child still exiting is joined, then killed, so the server exits within 10 s and leaves none.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

# After LitServe's own shutdown, how long its last processes may take to exit before they are
# killed: the server exits within 10 s of SIGTERM (drain_timeout 8 s + this).
REAP_TIMEOUT_S = 1.5


def stop_on_signals() -> list[str]:
    """SIGTERM in the main process: LitServe's interrupt shutdown (drain, join every child).
    Returns a list that will hold the name of the signal that stopped the server.

    Processes LitServe forks (its ZeroMQ broker, its HTTP servers) get the default action back at
    once: the broker, stopped with SIGTERM at exit, would otherwise die of this handler's
    KeyboardInterrupt with a traceback; the HTTP servers install uvicorn's own graceful handlers.
    """

    stopped_by: list[str] = []

    def on_sigterm(signum: int, frame: Any) -> None:
        stopped_by.append(signal.Signals(signum).name)
        # Only the first signal starts the shutdown. A second one arrives while LitServe drains
        # and joins its children (`make serve` passes its own SIGTERM on to the server, a
        # scheduler signals the whole group, a second Ctrl-C): raising again would abort that
        # shutdown half-way, with a traceback and children left behind.
        if len(stopped_by) == 1:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigterm)
    _wake_main_thread_once()
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    os.register_at_fork(
        after_in_child=lambda: signal.signal(signal.SIGINT, signal.default_int_handler)
    )
    os.register_at_fork(after_in_child=lambda: signal.set_wakeup_fd(-1))
    return stopped_by


def _wake_main_thread_once() -> None:
    """Deliver the first signal to the main thread itself.

    The kernel may hand a process's signal to any of its threads. Python runs the handler in the
    main thread only when that thread next runs Python code, and LitServe's main thread waits
    for its shutdown event in a blocking read from its queue manager: a signal taken by another
    thread never interrupts that read, and the server hangs instead of stopping. Python writes
    every signal to the wakeup fd, whichever thread took it; this thread reads the first one and
    sends it again to the main thread, whose read then returns to run the handler.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    main = threading.main_thread().ident

    def wake() -> None:
        signum = os.read(read_end, 1)[0]
        signal.pthread_kill(main, signum)

    threading.Thread(target=wake, name="serve-signal-waker", daemon=True).start()


def reap_children(timeout: float = REAP_TIMEOUT_S) -> None:
    """LitServe returns once it has told its processes to stop, and one of them (its ZeroMQ
    broker, its queue manager) can still be exiting: the server would exit leaving it running.
    Each child gets what is left of `timeout` to finish, then is killed."""
    deadline = time.monotonic() + timeout
    for child in multiprocessing.active_children():
        child.join(max(0.0, deadline - time.monotonic()))
    for child in multiprocessing.active_children():
        child.kill()
        child.join(1.0)
