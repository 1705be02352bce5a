"""Every command line of README.md and docs/*.md is either run here as written or listed here with
the reason it is not. The command blocks that run on CPU in seconds run as written in a clone with
the venv active and nothing else set, the server lines included (started as written, asked with
the page's own curl body, stopped by SIGTERM to the process group). A command line added to a page
fails this test until it is sorted into one of the lists, so the pages and the test cannot drift
apart. The README stays short, and every link of the README and docs/ leads to a page (and a
section) that exists.

"Bring your own module" (docs/your-project.md) has its own tests (tests/test_bring_your_own*.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.config import REPO
from tests.helpers.serving import STARTUP_TIMEOUT_S, stop_group
from tests.test_bring_your_own import FENCE, RUN_DIR, clone, run_line, venv_env

# Run, in this order: each a line of README.md (the common commands) or docs/ as written, `<run>`
# being the default run's id.
RUN = (
    "python scripts/train.py",
    "python scripts/train.py debug=fdr",
    "python scripts/eval.py ckpt_path=logs/train/runs/<run>/checkpoints/best.ckpt",
    'make predict ARGS="ckpt_path=logs/train/runs/<run>/checkpoints/best.ckpt"',
    'make export ARGS="ckpt_path=logs/train/runs/<run>/checkpoints/best.ckpt"',
    "make doctor",
)
# Run while the export above exists: each server line as written (README.md, docs/shipping.md),
# then docs/shipping.md's request to it.
SERVE_LINES = (
    "make serve",
    "python scripts/serve.py artifact=logs/train/runs/<run>/export port=8000",
)
CURL = (
    'curl -s localhost:8000/predict -d \'{"inputs":[[[0,0,5,13,9,1,0,0],[0,0,13,15,10,15,5,0],'
    "[0,3,15,2,0,11,8,0],[0,4,12,0,0,8,8,0],[0,5,8,0,0,9,8,0],[0,4,11,0,1,12,7,0],"
    "[0,2,14,5,10,12,0,0],[0,0,6,13,10,0,0,0]]]}'"
)
# docs/shipping.md's .npy request: the file it makes, then the request, and its Python twin.
NPY_SAVE = (
    'python -c "import numpy as np; from sklearn.datasets import load_digits; '
    "np.save('digits.npy', load_digits().images[:4].astype(np.float32))\""
)
NPY_CURL = (
    "curl -s localhost:8000/predict -H 'Content-Type: application/x-npy' --data-binary @digits.npy"
)
VERIFY_EXPORT = (
    'python -c "from trainwell.deploy.artifact import verify_export; '
    "verify_export('<run dir>/export')\""
)

DEFAULT_VARIANT = "a full default-length run again (about a minute each on 2 cores)"
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
        "needs a samples.npy the pages do not make (tests/deploy covers input=)"
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
    "python scripts/train.py ema.decay=0.98": (
        "a default run with EMA: a minute; tests/training/test_ema.py runs short ones"
    ),
    "python scripts/train.py ema.decay=0.999 ema.update_starting_at_step=1000 "
    "ema.update_every_n_steps=2": DEFAULT_VARIANT,
    "python scripts/train.py cv.folds=5": (
        "five default runs, minutes; tests/training/test_cross_validation*.py run 4 short folds"
    ),
    "python scripts/train.py experiment=diabetes_regression cv.folds=5": (
        "five regression runs; src/project/tests/data/test_diabetes.py runs 3 short folds"
    ),
    "python scripts/train.py cv.folds=5 resume=auto run_id=cv1": (
        "resumes a CV run; kills and resume=auto are tested in tests/training"
    ),
    "python scripts/train.py -m cv.folds=5 cv.fold=0,1,2,3,4": (
        "five default runs; the fold jobs and their joining are tested in tests/training"
    ),
    "python scripts/train.py -m hparams_search=digits_optuna cv.folds=5 "
    "optimized_metric=cv/acc_mean hydra.sweeper.direction=maximize": "100 runs (20 trials x 5 folds)",
    'make test-slow WORKERS=0 ARGS="tests/deploy/test_serve_parity.py -s"': (
        "a test of the slow suite, which CI runs"
    ),
}


GPU_SUITE = "the GPU suite: a GPU box (docs/benchmarks.md gives its figures)"
CPU_BENCH = "a benchmark: minutes, and its figures are docs/benchmarks.md's (tests/test_benchmarks_*.py runs it small)"
WHEELS = "fetching wheels for the GPU box: a network and a GPU box"
UPGRADE_T = "run on a real clone of a small template by tests/test_upgrade.py"
UPGRADE_COPIED = "what make upgrade prints for a copied clone; tests/test_upgrade.py runs it on one"
DOCS_EXCLUDED = {
    "python scripts/train.py -m launcher=local trainer=gpu model.optimizer.lr=1e-3,3e-3,1e-2,3e-2": (
        "four GPUs; tests/training/test_local_launcher.py runs launcher=local with declared GPUs"
    ),
    "python scripts/train.py -m launcher=local hydra.launcher.slots=2 seed=1,2,3,4": (
        "four default runs; tests/training/test_local_launcher.py runs it as written, made small"
    ),
    "python scripts/train.py -m hparams_search=digits_optuna launcher=local trainer=gpu "
    "hydra.sweeper.n_jobs=4": (
        "four GPUs; tests/training/test_local_launcher.py runs the CPU search on launcher=local"
    ),
    "python scripts/train.py -m hparams_search=digits_optuna launcher=local "
    "hydra.launcher.slots=2 hydra.sweeper.n_jobs=2": (
        "a 20-trial search; tests/training/test_local_launcher.py runs it as written, made small"
    ),
    "make bench": "every training-side benchmark: minutes (each runs small in tests/test_benchmarks_*.py)",
    "make bench-long": "the minute-long benchmarks (each runs small in tests/test_benchmarks_*.py)",
    **{
        f".venv/bin/python benchmarks/pace.py {name}": CPU_BENCH
        for name in ("overhead", "host", "epoch")
    },
    **{
        f".venv/bin/python benchmarks/shipping.py {name}": CPU_BENCH
        for name in ("serving", "shutdown", "export")
    },
    **{
        f".venv/bin/python benchmarks/features.py {name}": CPU_BENCH
        for name in (
            "startup",
            "guards",
            "ema",
            "cv",
            "summary",
            "resume",
            "state",
            "doctor",
            "imbalance",
            "memory",
            "data_pipeline",
        )
    },
    "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pace.py epoch": CPU_BENCH,
    "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pace.py throughput --reps 3": CPU_BENCH,
    ".venv/bin/python benchmarks/pace.py throughput --ops": CPU_BENCH,
    ".venv/bin/python benchmarks/pace.py throughput --ops --num-samples 64 --num-val 16 --batch 8 "
    "--width 8 --modes fp32 bf16 bf16_cl bf16_cl_compile": CPU_BENCH,
    "python scripts/summarize.py logs/train/multiruns/<id>": (
        "rebuilds a sweep's summary; tests/training/test_sweep_summary.py runs it on a real sweep"
    ),
    "python scripts/cv_assemble.py logs/train/cv/<array job id>": (
        "joins a SLURM array's fold tasks; the joining is tested in tests/training"
    ),
    "python scripts/cv_assemble.py logs/train/multiruns/<id>": (
        "joins a multirun's fold jobs; the joining is tested in tests/training"
    ),
    ".venv/bin/python benchmarks/pace.py throughput": GPU_SUITE,
    ".venv/bin/python benchmarks/gpu_suite.py --part throughput|features|syncs": GPU_SUITE,
    ".venv/bin/python benchmarks/host_syncs.py": GPU_SUITE,
    "echo /.whl/ >> .git/info/exclude && mkdir -p .whl": WHEELS,
    "python3 -m pip download --no-deps -d .whl hydra-core==1.3.2 omegaconf==2.3.0": WHEELS,
    "python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3": WHEELS,
    "python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export "
    "PYTHONPATH=/tmp/site": WHEELS,
    "PYTHONUNBUFFERED=1 python3 benchmarks/gpu_suite.py --part features": GPU_SUITE,
    "PYTHONUNBUFFERED=1 python3 benchmarks/gpu_suite.py --part throughput --reps 1": GPU_SUITE,
    "PYTHONUNBUFFERED=1 python3 benchmarks/gpu_suite.py --part syncs": GPU_SUITE,
    "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pace.py host": CPU_BENCH,
    "mkdir -p logs/slurm": "prepares a SLURM submission",
    **dict.fromkeys(
        (
            "make upgrade TEMPLATE=<template url or path> REF=<release tag>",
            "git checkout HEAD^2 -- <file>",
            "git merge --abort",
            "git add <file>",
            "git commit",
            'git log --merges -1 --format=%s --grep="^Upgrade the template"',
            "git fetch <template url or path> <release tag>",
            "git checkout FETCH_HEAD -- scripts/upgrade.py && git commit -m 'Take make upgrade'",
            "python3 scripts/upgrade.py <template url or path> <release tag>",
        ),
        UPGRADE_T,
    ),
    "git fetch <template url or path> <release tag you started from>": UPGRADE_COPIED,
    "git merge --allow-unrelated-histories -s ours -m 'Start from the template' FETCH_HEAD": (
        UPGRADE_COPIED
    ),
    "git status": "git's own report of uncommitted work",
    "make schema": (
        "the same as `python scripts/schema.py`, which tests/test_schemas.py runs in a copy of the "
        "project"
    ),
    "make schema ARGS=/path/to/conf": (
        "a config dir of your own; tests/test_schemas.py runs the script with one"
    ),
    'grep -rnE "trainwell\\.(data|models|tasks)\\b" --include=*.py --include=*.yaml '
    "--exclude-dir=.venv --exclude-dir=logs --exclude-dir=trainwell .": (
        "a search of the user's own code, whose result is theirs"
    ),
    'grep -rnE "project\\.(data|models|tasks)\\.[A-Z]|from project\\.(data|models|tasks) import" '
    "--include=*.py --include=*.yaml --exclude-dir=.venv --exclude-dir=logs .": (
        "a search of the user's own code, whose result is theirs"
    ),
}
BY_ITS_OWN_TEST = "run as written by tests/test_bring_your_own_commands.py"
BY_ITS_OWN = {
    "python scripts/train.py model=my_module data=my_data monitor.metric=val/loss monitor.mode=min": (
        BY_ITS_OWN_TEST
    ),
    "python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt": BY_ITS_OWN_TEST,
    "python scripts/doctor.py model=my_module data=my_data monitor.metric=val/loss "
    "monitor.mode=min": BY_ITS_OWN_TEST,
}
DOCS_RUN = (VERIFY_EXPORT,)
# Not run, since they need a SLURM cluster or several GPUs: every sbatch, SLURM launcher and
# torchrun line of docs/cluster.md.
CLUSTER_LINE = re.compile(
    r"(sbatch|python scripts/train\.py -m launcher=slurm|TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun)"
)
README_MAX_LINES = 300
SHIPPING = REPO / "docs" / "shipping.md"


def _bash_lines(text: str) -> list[str]:
    """The commands of `text`'s bash blocks, comments cut and continuation lines joined."""
    lines: list[str] = []
    for kind, body in FENCE.findall(text):
        if kind != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            command = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if command:
                lines.append(re.sub(r"\s+", " ", command))
    return lines


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _page_lines() -> dict[str, list[str]]:
    """{page: the commands of its bash blocks} for README.md and every docs/ page."""
    return {str(page.relative_to(REPO)): _bash_lines(page.read_text()) for page in _pages()}


@pytest.mark.example(
    "project.data.cifar10",
    "project.data.diabetes",
    "project.data.sequences",
    "project.data.synthetic",
    "project.models.resnet",
    "project.models.transformer",
    "project.tasks.language_model",
    "project.tasks.regression",
)
def test_every_command_of_the_readme_and_docs_is_run_or_excluded_with_a_reason() -> None:
    pages = _page_lines()
    run = (*RUN, *SERVE_LINES, CURL, NPY_SAVE, NPY_CURL, *DOCS_RUN)
    excluded = {**EXCLUDED, **DOCS_EXCLUDED, **BY_ITS_OWN}
    unsorted = [
        f"{page}: {line}"
        for page, lines in pages.items()
        for line in lines
        if line not in run and line not in excluded and not CLUSTER_LINE.match(line)
    ]
    assert unsorted == [], f"commands neither run nor excluded here: {unsorted}"
    every = {line for lines in pages.values() for line in lines}
    stale = [line for line in (*run, *excluded) if line not in every]
    assert stale == [], f"listed here but no longer in README.md or docs/: {stale}"


def test_the_common_commands_stay_in_the_readme() -> None:
    """What a newcomer runs first is on the README itself, not a click away."""
    readme = _page_lines()["README.md"]
    common = (
        "make train",
        "make test",
        "source .venv/bin/activate",
        *RUN[:1],
        *RUN[2:],
        "make serve",
    )
    assert [line for line in common if line not in readme] == []


def test_the_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference text to docs/"


LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def _anchors(text: str) -> set[str]:
    """The section anchors GitHub makes of a page's headings (code blocks left out)."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", CODE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
        anchors.add(slug.replace(" ", "-"))
    return anchors


def test_every_link_of_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in _pages():
        text = page.read_text()
        for target in LINK.findall(CODE.sub("", text)):
            if re.match(r"[a-z]+:", target):  # http(s):, mailto: -- not a page of this repo
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text()):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such section)")
    assert broken == [], f"links that lead nowhere: {broken}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone after the quickstart: `make train` has set up .venv (here: the suite's own)."""
    root = clone(tmp_path_factory.mktemp("readme"))
    venv = Path(os.environ.get("VIRTUAL_ENV") or REPO / ".venv")
    (root / ".venv").symlink_to(venv if venv.is_dir() else REPO / ".venv")
    return root


def _serve_as_written(project: Path, line: str) -> None:
    """A server line of README.md or docs/shipping.md, started as typed in the clone (venv active,
    nothing added), asked with docs/shipping.md's own curl line once /health answers, stopped by
    SIGTERM to its group."""
    with socket.socket() as sock:  # the pages' port: a clear message if something holds it
        assert sock.connect_ex(("127.0.0.1", 8000)) != 0, "port 8000 is in use: free it first"
    proc = subprocess.Popen(
        shlex.split(line), cwd=project, env=venv_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get("http://127.0.0.1:8000/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        assert proc.poll() is None, f"{line}: exited {proc.returncode}: {proc.communicate()[1]}"
        asked = run_line(project, CURL, timeout=60)
        assert asked.returncode == 0, asked.stderr
        answer = json.loads(asked.stdout)
        assert answer["predictions"] == [0] and answer["labels"] == ["0"], answer
        asked = run_line(project, NPY_CURL, timeout=60)
        assert asked.returncode == 0, asked.stderr
        assert json.loads(asked.stdout)["predictions"] == [0, 1, 2, 3], asked.stdout
        python = next(
            b for k, b in FENCE.findall(SHIPPING.read_text()) if k == "python" and "x-npy" in b
        )
        asked = run_line(project, f"python -c {shlex.quote(python)}", timeout=60)
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.strip() == "[0, 1, 2, 3]", asked.stdout
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        stop_group(proc)
    assert "Traceback" not in err, err[-3000:]
    assert "serve: stopped by SIGTERM" in out.strip().splitlines(), out[-2000:]
    if not line.startswith("make"):  # make reports a SIGTERM of its own ("Interrupt", -15)
        assert proc.returncode == 0, err[-3000:]


@pytest.mark.slow  # six real runs of the scripts and two servers, about two minutes on 2 cores
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
    assert (run_dir / "predictions" / "test.csv").is_file()
    for line in DOCS_RUN:
        proc = run_line(project, line.replace("<run dir>", str(run_dir)))
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
    proc = run_line(project, NPY_SAVE)  # the .npy body the server lines are asked with too
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in SERVE_LINES:
        _serve_as_written(project, line.replace("<run>", run))
    # predict and export leave no run dirs of their own
    assert (
        not (project / "logs" / "predict").exists() and not (project / "logs" / "export").exists()
    )
    proc = run_line(project, doctor)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = Path(RUN_DIR.findall(proc.stdout)[-1]) / "doctor" / "report.json"
    assert json.loads(report.read_text())["checks"]
