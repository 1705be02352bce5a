"""A logger that keeps what it is given, for tests that read logged rows."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import Logger


class MemoryLogger(Logger):
    """A real (if minimal) Lightning logger that keeps what it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append((step, dict(metrics)))
