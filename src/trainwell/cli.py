"""The one place a script turns an exception into a one-line message and an exit code."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import trainwell.resolvers  # noqa: F401  (registers resolvers before Hydra composes)
from trainwell.errors import TrainwellError

EXIT_USAGE = 2
EXIT_FAILURE = 1


def _user_error(err: BaseException) -> TrainwellError | None:
    """Hydra's instantiate wraps constructor errors; find ours in the cause chain."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, TrainwellError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _save_traceback(err: BaseException) -> Path | None:
    try:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # HydraConfig not set: running outside hydra.main
        return None
    path = run_dir / "error.log"
    path.write_text("".join(traceback.format_exception(err)))
    return path


def hydra_entry(
    config_dir: Path, config_name: str, job: Callable[[DictConfig], Any]
) -> Callable[[], Any]:
    """Wrap `job` in hydra.main: exit 0 / the job's int, 2 on bad input, 1 on a crash.

    Users see one line naming the cause; the full traceback goes to <run dir>/error.log
    (HYDRA_FULL_ERROR=1 re-raises it instead).
    """

    @hydra.main(version_base="1.3", config_path=str(config_dir), config_name=config_name)
    def main(cfg: DictConfig) -> None:
        try:
            code = job(cfg)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:
            user = _user_error(err)
            if user is not None:
                print(f"error: {_first_line(user)}", file=sys.stderr)
                raise SystemExit(EXIT_USAGE) from None
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            where = _save_traceback(err)
            detail = f" (traceback: {where})" if where else ""
            print(f"error: {type(err).__name__}: {_first_line(err)}{detail}", file=sys.stderr)
            raise SystemExit(EXIT_FAILURE) from None
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            raise SystemExit(code)

    return main
