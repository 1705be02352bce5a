"""Serve an export: `python scripts/serve.py artifact=<run dir>/export [port=8000]`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import hydra_entry
from trainwell.deploy.artifact import served_export


def serve_job(cfg):
    from trainwell.deploy.serve import serve

    return serve(cfg)


main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf", "serve", serve_job, check_paths=served_export
)

if __name__ == "__main__":
    main()
