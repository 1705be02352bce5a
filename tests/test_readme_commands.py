"""The README's command blocks that run on CPU in seconds, run as written in a clone with the venv
active and nothing else set; every other command line of the README is listed here with the
reason it is not run. A command line added to the README fails this test until it is sorted
into one of the two lists, so the README and the test cannot drift apart.

"Bring your own module" has its own test (tests/test_bring_your_own.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers.config import REPO
from tests.test_bring_your_own import FENCE, RUN_DIR, clone, run_line

# Run, in this order: each a README line as written, `<run>` being the default run's id.
RUN = (
    "python scripts/train.py",
    "python scripts/train.py debug=fdr",
    "python scripts/eval.py ckpt_path=logs/train/runs/<run>/checkpoints/best.ckpt",
    'make predict ARGS="ckpt_path=logs/train/runs/<run>/checkpoints/best.ckpt"',
    'make export ARGS="ckpt_path=logs/train/runs/<run>/checkpoints/best.ckpt"',
    "make doctor",
)

DEFAULT_VARIANT = "a full default-length run again (about a minute each on 2 cores)"
SERVER = (
    "a server that runs until it is stopped: tests/deploy/test_serve.py starts the real one on a "
    "free port, sends requests and stops it"
)
EXCLUDED = {
    "make train": "the same run as `python scripts/train.py`, which is run",
    "make test": "the test suite itself",
    "source .venv/bin/activate": "the environment every command here runs in",
    "python scripts/train.py experiment=resnet_accum": "CIFAR-10: a download, then minutes",
    "python scripts/train.py experiment=resnet_accum data.download=true": "downloads CIFAR-10",
    "python scripts/train.py experiment=resnet_accum data=synthetic data.num_samples=512 "
    "trainer.max_epochs=1": (
        "full-width ResNet-18 on CPU: not seconds (a small one runs in test_train_script.py)"
    ),
    "python scripts/train.py seed=1 data.batch_size=32 trainer.accumulate_grad_batches=2": (
        DEFAULT_VARIANT
    ),
    "python scripts/train.py model=resnet18 data=synthetic model.net.norm=group "
    "model/optimizer=adamw": "full-width ResNet-18 on 4096 samples: minutes on CPU",
    "python scripts/train.py trainer=gpu trainer.precision=bf16-mixed model.compile=true": "GPU",
    "python scripts/train.py logger=wandb": DEFAULT_VARIANT,
    "python scripts/train.py model.scheduler=null": DEFAULT_VARIANT,
    "python scripts/train.py -m seed=1,2,3 model.optimizer.lr=0.001,0.003": "six runs: minutes",
    "python scripts/train.py -m hparams_search=digits_optuna hydra.sweeper.n_trials=6": (
        "six trials: minutes"
    ),
    "python scripts/train.py -m hparams_search=resnet_accum_optuna trainer=gpu "
    "trainer.max_epochs=10": "GPU",
    "python scripts/eval.py ckpt_path=<...>/best.ckpt trainer=ddp_sim data.eval_batch_size=256": (
        "two processes of the eval already run; ddp_sim's equality is tested in tests/training"
    ),
    "python scripts/predict.py ckpt_path=<...>/best.ckpt input=samples.npy": (
        "needs a samples.npy the README does not make (tests/deploy covers input=)"
    ),
    "python scripts/train.py experiment=lm_accum": "about 30 s, and its doctor as long again",
    "python scripts/train.py experiment=lm_accum data.path=book.txt data.vocab_size=128": (
        "needs the user's own text file"
    ),
    "python scripts/doctor.py experiment=lm_accum": "the language model's probes: tens of seconds",
    "python scripts/train.py experiment=digits_imbalanced": DEFAULT_VARIANT,
    "python scripts/train.py experiment=digits_imbalanced data.sampler=weighted": DEFAULT_VARIANT,
    "python scripts/train.py experiment=digits_imbalanced model.loss.class_weights=balanced": (
        DEFAULT_VARIANT
    ),
    "python scripts/train.py experiment=digits_imbalanced monitor.metric=val/balanced_acc": (
        DEFAULT_VARIANT
    ),
    "python scripts/doctor.py experiment=resnet_accum data=synthetic": (
        "full-width ResNet-18 probes on CPU: minutes"
    ),
    "python scripts/train.py doctor=true": "the doctor and then a full default run",
    "python scripts/train.py run_id=exp1 resume=auto": DEFAULT_VARIANT,
    "python scripts/train.py ckpt_path=<run dir>/checkpoints/last.ckpt": (
        "resumes a run; resume is tested end to end in tests/training"
    ),
    "mkdir -p logs/slurm && sbatch --ntasks-per-node=4 --gpus-per-node=4 "
    "scripts/slurm/train.sbatch trainer=ddp": "a SLURM cluster",
    "python scripts/train.py -m launcher=slurm trainer=ddp seed=1,2,3": "a SLURM cluster",
    "torchrun --nproc-per-node=4 scripts/train.py trainer=ddp trainer.devices=4 "
    "hydra.run.dir=<dir> resume=auto": "four GPUs",
    "python scripts/train.py cv.folds=5": (
        "five default runs, minutes; tests/training/test_cross_validation*.py run 4 short folds"
    ),
    "python scripts/train.py cv.folds=5 resume=auto run_id=cv1": (
        "resumes a CV run; kills and resume=auto are tested in tests/training"
    ),
    "python scripts/train.py -m cv.folds=5 cv.fold=0,1,2,3,4": (
        "five default runs; the fold jobs and their joining are tested in tests/training"
    ),
    "python scripts/cv_assemble.py logs/train/multiruns/<id>": "joins the fold jobs above",
    "python scripts/train.py -m hparams_search=digits_optuna cv.folds=5 "
    "optimized_metric=cv/acc_mean hydra.sweeper.direction=maximize": "100 runs (20 trials x 5 folds)",
    "make serve": SERVER,
    "python scripts/serve.py artifact=logs/train/runs/<run>/export port=8000": SERVER,
    "curl -s localhost:8000/predict -d '{\"inputs\": [[[0,0,5,13,9,1,0,0], ...8 rows...]]}'": (
        "a request to that server, its body shortened for the page"
    ),
    'make test-slow ARGS="tests/deploy/test_serve_parity.py -s"': (
        "a test of the slow suite, which CI runs"
    ),
}


def _command_lines() -> list[str]:
    """Every command of the README's bash blocks outside "Bring your own module", comments cut
    and continuation lines joined."""
    readme = (REPO / "README.md").read_text()
    before, _, rest = readme.partition("## Bring your own module")
    after = rest.split("\n## ", 1)[1] if "\n## " in rest else ""
    lines: list[str] = []
    for kind, body in FENCE.findall(before + "\n## " + after):
        if kind != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                lines.append(re.sub(r"\s+", " ", command))
    return lines


def test_every_readme_command_is_run_or_excluded_with_a_reason() -> None:
    lines = _command_lines()
    unsorted = [line for line in lines if line not in RUN and line not in EXCLUDED]
    assert unsorted == [], f"README commands neither run nor excluded here: {unsorted}"
    stale = [line for line in (*RUN, *EXCLUDED) if line not in lines]
    assert stale == [], f"listed here but no longer in the README: {stale}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone after the quickstart: `make train` has set up .venv (here: the suite's own)."""
    root = clone(tmp_path_factory.mktemp("readme"))
    venv = Path(os.environ.get("VIRTUAL_ENV") or REPO / ".venv")
    (root / ".venv").symlink_to(venv if venv.is_dir() else REPO / ".venv")
    return root


@pytest.mark.slow  # six real runs of the scripts, about a minute on 2 cores
def test_the_cpu_command_blocks_run_as_written(project: Path) -> None:
    train, fdr, evaluate, predict, export, doctor = RUN
    proc = run_line(project, train)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(RUN_DIR.findall(proc.stdout)[-1])
    assert run_dir.parent == project / "logs" / "train" / "runs"
    assert json.loads((run_dir / "results.json").read_text())["metrics"]["test/acc"] >= 0.97

    proc = run_line(project, fdr)
    assert proc.returncode == 0, proc.stderr[-3000:]

    run = run_dir.name
    for line in (evaluate, predict, export):
        proc = run_line(project, line.replace("<run>", run))
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
    proc = run_line(project, doctor)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = Path(RUN_DIR.findall(proc.stdout)[-1]) / "doctor" / "report.json"
    assert json.loads(report.read_text())["checks"]
