"""The "Bring your own module" project of docs/your-project.md, verbatim: plain Lightning classes
that import nothing from trainwell, written where the page puts them (`src/project/`, the
cloner's room, and configs under conf/) and run with the page's own commands, in a subprocess that
sets no PYTHONPATH, with the virtual environment active as the README asks.

The code, configs and commands are read out of docs/your-project.md, so the page cannot drift from
what is tested.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.config import REPO
from tests.helpers.scripts import run_python

FENCE = re.compile(r"```(python|yaml|bash)\n(.*?)```", re.DOTALL)
RUN_DIR = re.compile(r"^run dir: (\S+)$", re.M)


YOUR_PROJECT = REPO / "docs" / "your-project.md"


def _section(title: str) -> str:
    page = YOUR_PROJECT.read_text()
    return page.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def clone(into: Path) -> Path:
    """A cloner's copy of this checkout: every file git tracks or would track (no .venv, logs),
    committed in a fresh git repository as a clone holds them."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True
    )
    if listed.returncode == 0:
        names = listed.stdout.splitlines()
    else:  # a copy that is no git checkout (make mutants): its files less the environment
        skip = {".venv", "logs", ".git", "__pycache__", ".pytest_cache", ".ruff_cache"}
        names = [
            str(p.relative_to(REPO))
            for p in REPO.rglob("*")
            if not skip & set(p.relative_to(REPO).parts)
        ]
    for name in names:
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    # a clone is a git checkout: the template's files committed, the cloner's added after
    git = ["git", "-c", "user.name=cloner", "-c", "user.email=cloner@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "template"]):
        subprocess.run([*git, *args], cwd=into, capture_output=True, check=True)
    return into


def venv_env() -> dict[str, str]:
    """The environment of a shell after `source .venv/bin/activate`: nothing else set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    bin_dir = Path(sys.executable).parent
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env.update(PYTHONUNBUFFERED="1", WANDB_SILENT="true")
    return env


def run_line(root: Path, line: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """One command line of a page, as a user types it in the clone's root (the venv active)."""
    return subprocess.run(
        shlex.split(line, comments=True),
        cwd=root,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_in_clone(root: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """`python scripts/<script> args` in the clone's root with the venv active, as a fork of the
    tests' warm interpreter: the clone's own script and code, seconds less than `run_line`. The
    page's own command lines keep `run_line` (a shell's process, exactly as typed)."""
    return run_python({"path": str(root / "scripts" / script)}, list(args), root, venv_env())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory)


def make_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone with the section's files written where it says: src/project/ and conf/ (one per
    test file, which the page's commands share)."""
    root = clone(tmp_path_factory.mktemp("byo"))
    written = []
    for _, body in FENCE.findall(_section("Bring your own module")):
        first, _, rest = body.partition("\n")
        name = first.removeprefix("# ").strip()
        if not name.startswith(("src/project/", "conf/model/my_module", "conf/data/my_data")):
            continue
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rest)
        written.append(name)
    assert sorted(written) == [
        "conf/data/my_data.yaml",
        "conf/model/my_module.yaml",
        "src/project/lit.py",
    ]
    source = (root / "src" / "project" / "lit.py").read_text()
    assert "trainwell" not in source  # a user's plain Lightning code
    return root


def page_commands() -> list[str]:
    """The section's bash block: train, eval (of the run's best checkpoint) and the doctor."""
    blocks = [
        body for kind, body in FENCE.findall(_section("Bring your own module")) if kind == "bash"
    ]
    assert len(blocks) == 1, blocks
    return [line for line in blocks[0].splitlines() if line.strip()]


def _run(project: Path, script: str, run_dir: Path, *overrides: str):
    proc = run_in_clone(project, script, *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


USER = (
    "model=my_module",
    "data=my_data",
    "monitor.metric=val/loss",
    "monitor.mode=min",
    "trainer.deterministic=true",
    "print_config=false",
)


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow  # a training script run and an eval script run
def test_user_module_trains_and_evaluates_with_the_runs_own_config(
    project: Path, tmp_path: Path
) -> None:
    train_dir = tmp_path / "train"
    _run(project, "train.py", train_dir, *USER, "trainer.max_epochs=3")
    results = json.loads((train_dir / "results.json").read_text())
    assert results["plan"]["dataset_size"] == 150 and results["plan"]["micro_batch"] == 16
    assert results["best_ckpt"].endswith("best.ckpt") and results["last_ckpt"]
    # eval.py gets no model/data overrides: it reads them from the training run's dir.
    eval_dir = tmp_path / "eval"
    best = train_dir / "checkpoints" / "best.ckpt"
    _run(project, "eval.py", eval_dir, f"ckpt_path={best}")
    evaluated = json.loads((eval_dir / "results.json").read_text())["metrics"]
    assert evaluated["test/loss"] == results["metrics"]["test/loss"]


def test_user_module_accumulates_exactly_with_a_short_uneven_tail(
    project: Path, tmp_path: Path
) -> None:
    # 150 samples: batches of 4 give 37 x 4 + 2; K=4 -> 9 windows of 16 and a tail of 4 + 2.
    # Batches of 16 without accumulation: 9 x 16 and a last batch of 6: the same windows.
    common = (*USER, "trainer.max_epochs=2", "callbacks.early_stopping=null", "test=false")
    _run(project, "train.py", tmp_path / "k4", *common, "data.batch_size=4",
         "trainer.accumulate_grad_batches=4")  # fmt: skip
    _run(project, "train.py", tmp_path / "k1", *common, "data.batch_size=16")
    accumulated, full = _weights(tmp_path / "k4"), _weights(tmp_path / "k1")
    assert max((full[k] - accumulated[k]).abs().max().item() for k in full) <= 1e-6


@pytest.mark.slow
def test_user_module_on_two_ranks_equals_one_process(project: Path, tmp_path: Path) -> None:
    # 2 ranks x batch 4 x K=2 hold, window for window, the samples of 1 process x batch 16.
    common = (*USER, "trainer.max_epochs=2", "callbacks.early_stopping=null", "test=false")
    ddp = tmp_path / "ddp"
    _run(project, "train.py", ddp, *common, "trainer=ddp_sim", "data.batch_size=4",
         "trainer.accumulate_grad_batches=2")  # fmt: skip
    single = tmp_path / "single"
    _run(project, "train.py", single, *common, "data.batch_size=16")
    a, b = _weights(ddp), _weights(single)
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


@pytest.mark.slow
def test_user_metrics_of_one_checkpoint_are_the_same_on_1_2_and_3_ranks(
    project: Path, tmp_path: Path
) -> None:
    """`self.log(..., sync_dist=True)` of a per-batch mean: Lightning sums value x batch size and
    batch sizes across ranks, so with no padded duplicates every sample counts once."""
    _run(project, "train.py", tmp_path / "train", *USER, "trainer.max_epochs=1", "test=false")
    best = tmp_path / "train" / "checkpoints" / "best.ckpt"
    losses = []
    for world in ("trainer=cpu", "trainer=ddp_sim", "trainer.devices=3"):
        extra = ("trainer=ddp_sim", world) if world.startswith("trainer.devices") else (world,)
        out = tmp_path / f"eval-{len(losses)}"
        _run(project, "eval.py", out, f"ckpt_path={best}", *extra)
        losses.append(json.loads((out / "results.json").read_text())["metrics"]["test/loss"])
    assert max(losses) - min(losses) <= 1e-6, losses


@pytest.mark.slow  # a clone, a training run, predict and export
def test_user_module_predicts_and_exports_through_its_raw_form(
    project: Path, tmp_path: Path
) -> None:
    """MyModule.forward and MyData.raw_form, as docs/your-project.md shows them, are all predict and export
    need: the file matches the run's test/loss, the export passes parity."""
    run = tmp_path / "train"
    _run(project, "train.py", run, *USER, "trainer.max_epochs=2")
    ckpt = f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"
    _run(project, "predict.py", tmp_path / "p", ckpt)
    lines = (run / "predictions" / "test.csv").read_text().splitlines()
    assert lines[0] == "index,prediction,p_0,p_1,target"
    rows = [line.split(",") for line in lines[1:]]
    assert [int(r[0]) for r in rows] == list(range(150, 190))
    proc = _run(project, "export.py", tmp_path / "e", ckpt)
    assert "onnxruntime: agreement 1" in proc.stdout
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    assert manifest["input"]["shape"] == [None, 8]
    assert manifest["parity"]["paths"]["torch_export"]["max_abs_diff"] <= 1e-4
    # A datamodule without raw_form(): the batch form its loaders yield, said in one line.
    (project / "src" / "project" / "plain.py").write_text(
        "from project.lit import MyData\n\n\nclass PlainData(MyData):\n    raw_form = None\n"
    )
    plain = tmp_path / "plain"
    _run(project, "train.py", plain, *USER, "data._target_=project.plain.PlainData",
         "trainer.max_epochs=1")  # fmt: skip
    line = shlex.join(["python", "scripts/export.py", f"ckpt_path={plain / 'checkpoints' / 'best.ckpt'}",
                       f"hydra.run.dir={tmp_path / 'e2'}"])  # fmt: skip
    proc = run_line(project, line)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("PlainData has no raw_form(): the graph takes the batch form") == 1
    manifest = json.loads((plain / "export" / "manifest.json").read_text())
    assert manifest["input"]["form"] == "batch" and manifest["input"]["shape"] == [None, 8]
    assert manifest["parity"]["paths"]["onnxruntime"]["agreement"] == 1.0
