"""Keep secrets (WANDB_API_KEY, any *_KEY / *_TOKEN / *_SECRET / *PASSWORD env) out of what a run
writes: logged hyperparameters, the printed config, results.

Hydra saves `.hydra/config.yaml` unresolved (`${oc.env:WANDB_API_KEY}` stays a reference), but
anything we resolve before logging would carry the value itself into hparams.yaml, the wandb run
config and the job's stdout (a SLURM .out file other users may read).
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|PASSWORD|^API_?KEY|^TOKEN)$", re.IGNORECASE)
_MIN_SECRET_LENGTH = 6  # shorter values ("1", "true") would redact ordinary config


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LENGTH]


def redact(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a plain container (dict / list / scalars) with secret-named keys and any string
    containing a secret env value replaced by <redacted>."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(obj, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and _SECRET_NAME.search(k) and v not in (None, "")
            else redact(v, secrets)
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, secrets) for v in obj)
    if isinstance(obj, str) and any(s in obj for s in secrets):
        return REDACTED
    return obj
