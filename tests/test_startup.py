"""A mistake on the command line is answered before torch, Lightning and torchvision are imported.

Every script composes its config, checks keys, the template's values and the checkpoint or export
it is told to read, and only then imports the heavy libraries: the one-line error comes in well
under a second instead of after five seconds of imports. Proved by what the real script imports
(`python -X importtime`), not by a clock: `benchmarks/features.py startup` measures the seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.scripts import HEAVY, imported_and_stderr, run_script
from trainwell import compat

MISSING = "missing/best.ckpt"
CASES = [
    (
        "train.py",
        ["trainer.max_epoch=1"],
        "error: unknown config key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'? "
        "(add a new key with +trainer.max_epoch=...)",
    ),
    (  # the suggestion never resolves model.num_classes (that imports the datamodule's class)
        "train.py",
        ["model.num_clases=3"],
        "error: unknown config key 'model.num_clases'; did you mean 'model.num_classes'? "
        "(add a new key with +model.num_clases=...)",
    ),
    (
        "train.py",
        ["data.batch_size=0"],
        "error: data.batch_size=0 is invalid: expected an integer >= 1 (the micro-batch)",
    ),
    (
        "train.py",
        [f"ckpt_path={{tmp}}/{MISSING}"],
        f"error: checkpoint not found: {{tmp}}/{MISSING}; pass ckpt_path=<an existing .ckpt>, or "
        "resume=auto in its place to continue from the run dir's newest checkpoint",
    ),
    (
        "eval.py",
        [f"ckpt_path={{tmp}}/{MISSING}"],
        f"error: checkpoint not found: {{tmp}}/{MISSING}; pass ckpt_path=<path to an existing .ckpt>",
    ),
    (
        "doctor.py",
        ["trainer.max_epoch=1"],
        "error: unknown config key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'? "
        "(add a new key with +trainer.max_epoch=...)",
    ),
    (
        "doctor.py",
        ["+probe.nonsense=1"],
        "error: unknown doctor setting(s) probe.nonsense; known: accelerator, batch_size, "
        "leakage_max_samples, memory_steps, overfit_budget_s, overfit_max_ratio, "
        "overfit_max_steps, overfit_steps, scan_batches, scheduler_interval, threads, "
        "throughput_batches, window_batches",
    ),
    (
        "doctor.py",
        ["probe.batch_size=abc"],
        "error: probe.batch_size='abc' is invalid: expected int",
    ),
    (
        "predict.py",
        [f"ckpt_path={{tmp}}/{MISSING}"],
        f"error: checkpoint not found: {{tmp}}/{MISSING}; pass ckpt_path=<an existing .ckpt>",
    ),
    (
        "export.py",
        [f"ckpt_path={{tmp}}/{MISSING}"],
        f"error: checkpoint not found: {{tmp}}/{MISSING}; pass ckpt_path=<an existing .ckpt>",
    ),
    (
        "serve.py",
        ["artifact={tmp}/missing/export"],
        "error: export directory not found: {tmp}/missing/export; "
        "run python scripts/export.py ckpt_path=<ckpt>",
    ),
]


@pytest.mark.parametrize(
    ("script", "overrides", "expected"),
    CASES,
    ids=[f"{script} {' '.join(o)}".replace("{tmp}/", "") for script, o, _ in CASES],
)
def test_a_mistake_is_one_line_before_torch_lightning_torchvision(
    script: str, overrides: list[str], expected: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = run_script(
        script,
        *(o.format(tmp=tmp_path) for o in overrides),
        f"hydra.run.dir={run_dir}",
        python_options=("-X", "importtime"),
    )
    imported, stderr = imported_and_stderr(proc)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert stderr[-1:] == [expected.format(tmp=tmp_path)], stderr
    assert "hydra" in imported  # the import log was read
    assert not imported & HEAVY, f"imported before the error: {sorted(imported & HEAVY)}"
    assert not run_dir.exists()  # answered before Hydra writes anything


def test_every_compat_name_resolves_to_its_module() -> None:
    """compat imports its modules on first use: each name it lists must be found there."""
    for name in compat.__all__:
        value = getattr(compat, name)
        assert getattr(value, "__module__", compat.__name__).startswith(compat.__name__), name
