"""A checkpoint is untrusted input: a planted pickle must be refused without running; secrets
from the environment must not land in anything a run writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers.scripts import run_script
from trainwell.errors import TrainwellError
from trainwell.io.checkpoint_read import load_checkpoint_file
from trainwell.io.checkpoint_write import AtomicCheckpointIO
from trainwell.io.redact import REDACTED, redact
from trainwell.training.resume import find_newest_checkpoint


class _Exploit:
    """Unpickling this calls `touch <marker>`: what a malicious .ckpt would do on a plain load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (subprocess.call, (["touch", str(self.marker)],))


def plant(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "global_step": 10**6, "payload": _Exploit(marker)}, path)
    return path


def test_the_planted_pickle_really_executes_code_without_weights_only(tmp_path: Path) -> None:
    """Guards the test itself: the file is a live exploit, so refusing it means something."""
    marker = tmp_path / "pwned"
    evil = plant(tmp_path / "evil.ckpt", marker)
    torch.load(evil, weights_only=False)
    assert marker.exists()


def test_loaders_refuse_the_pickle_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = plant(tmp_path / "run" / "checkpoints" / "evil.ckpt", marker)
    with pytest.raises(TrainwellError, match=r"refusing to load .* pickled code"):
        load_checkpoint_file(evil)
    with pytest.raises(TrainwellError, match="refusing to load"):
        # Even a caller asking for weights_only=False gets the safe load.
        AtomicCheckpointIO().load_checkpoint(evil, weights_only=False)
    assert find_newest_checkpoint(evil.parent) is None  # resume=auto skips it
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_scripts_refuse_the_pickle_and_nothing_runs(tmp_path: Path, script: str) -> None:
    marker = tmp_path / "pwned"
    evil = plant(tmp_path / "evil.ckpt", marker)
    proc = run_script(
        script, f"ckpt_path={evil}", "print_config=false", f"hydra.run.dir={tmp_path}"
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: refusing to load {evil}")
    assert not marker.exists()


def test_redact_removes_secret_names_and_secret_values() -> None:
    secrets = ["s3cr3t-wandb-key"]
    cfg = {
        "logger": {"wandb": {"api_key": "anything", "project": "trainwell"}},
        "note": "key=s3cr3t-wandb-key",
        "tags": ["ok", "s3cr3t-wandb-key"],
        "lr": 0.1,
    }
    out = redact(cfg, secrets)
    assert out["logger"]["wandb"] == {"api_key": REDACTED, "project": "trainwell"}
    assert out["note"] == REDACTED and out["tags"] == ["ok", REDACTED] and out["lr"] == 0.1


@pytest.mark.slow
def test_secrets_in_the_environment_never_land_in_run_outputs(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {"WANDB_API_KEY": "wandb-secret-0123456789", "HF_TOKEN": "hf-secret-token-987"}
    proc = run_script(
        "train.py",
        "trainer.max_epochs=1",
        "callbacks.rich_progress_bar=null",
        # A user pulling secrets into the config: resolved, they would reach hparams.yaml,
        # the wandb run config and the printed config.
        "+extra.wandb_key=${oc.env:WANDB_API_KEY}",
        "+extra.hub=${oc.env:HF_TOKEN}",
        f"hydra.run.dir={run_dir}",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "<redacted>" in proc.stdout  # the printed config shows the redaction
    outputs = {"stdout": proc.stdout, "stderr": proc.stderr}
    for path in run_dir.rglob("*"):
        if path.is_file():
            outputs[str(path)] = path.read_bytes().decode("latin-1")
    for secret in env.values():
        leaked = [name for name, text in outputs.items() if secret in text]
        assert not leaked, (secret, leaked)
