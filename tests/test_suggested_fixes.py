"""Every suggested fix works: a message that suggests an override, a command or an edit is run on
the case it names, the fix is applied exactly as the message words it (the printed override
added to the same command line, the printed command run, the edit made in a test-owned module),
and the command then does what was asked.

The registry of suggesting messages and the guard that keeps it complete are in
tests/test_suggestion_registry.py. The scripts run in-process (`call_script`): the process
boundary is not what is under test here, and each run is a second or two. The default suite
keeps the run dir, the checkpoint a run continues from, the batch on resume and predict's
flag; the other cases, a few seconds each, are marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers.config import CONF, OWNED, QUIET_RUN, REPO, with_baseline
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_script
from tests.helpers.suggestions import (
    after,
    applied,
    command_in,
    fill,
    one_line,
    overrides_in,
)
from trainwell.command_line import check_command_line, composed

pytestmark = pytest.mark.engine

UNFINISHED = "tests.owned.unfinished"
# The scripts run without model= or data= compose the default config, the digits example's.
DEFAULT_RUN = pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)
# A run of the engine tests' own modules cut to a few batches: each run here is about a second.
SHORT = (
    *OWNED,
    *QUIET_RUN,
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "test=false",
)


def _train(*argv: str) -> subprocess.CompletedProcess:
    return call_script("train.py", *argv)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _refused(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    return one_line(proc)


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("trainer.max_epoch=3", "trainer.max_epochs=3"), ("trainer=cpux", "trainer=cpu")],
    ids=["key", "group"],
)
def test_a_typo_runs_once_written_as_the_did_you_mean_names_it(typo: str, meant: str) -> None:
    argv = [*OWNED, typo]
    line = check_command_line(CONF, "train", with_baseline(argv))
    assert line is not None and "did you mean" in line, line
    suggested = re.search(r"did you mean '?([^'?\s]+)", line).group(1)  # type: ignore[union-attr]
    if "=" not in suggested:  # a key: the value the command line gave it
        suggested = f"{suggested}={typo.split('=', 1)[1]}"
    assert suggested == meant, line
    fixed = [*OWNED, suggested]
    assert check_command_line(CONF, "train", with_baseline(fixed)) is None
    key, value = meant.split("=")
    cfg = composed(CONF, "train", tuple(fixed))
    if key == "trainer":
        assert cfg.hydra.runtime.choices.trainer == value
    else:
        assert str(cfg.trainer.max_epochs) == value


@pytest.mark.slow
def test_a_new_key_added_as_the_message_says_reaches_the_runs_config(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = [*SHORT, "notes=baseline", f"hydra.run.dir={run_dir}"]
    line = _refused(_train(*argv))
    (suggested,) = overrides_in(after(line, "add a new key with"))
    assert suggested == "+notes=..."
    _ok(_train(*applied(argv, suggested.replace("...", "baseline"), dropping=["notes"])))
    assert "notes: baseline" in (run_dir / ".hydra" / "config.yaml").read_text()
    assert _results(run_dir)["finished_at"]["global_step"] == 2


@pytest.mark.slow
def test_an_unknown_resume_mode_runs_as_resume_auto(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _ok(_train(*SHORT, f"hydra.run.dir={run_dir}"))
    argv = [*SHORT, "trainer.max_epochs=2", "resume=yes", f"hydra.run.dir={run_dir}"]
    line = _refused(_train(*argv))
    (suggested,) = overrides_in(after(line, "use"))
    proc = _ok(_train(*applied(argv, suggested)))
    assert "resume=auto: resuming from" in proc.stdout
    assert _results(run_dir)["finished_at"]["epoch"] == 2


# -- the run dir and the checkpoint a run continues from -----------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short run of the engine tests' own modules: its run dir, with best and last."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    _ok(_train(*SHORT, f"hydra.run.dir={run_dir}"))
    return run_dir


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def test_a_run_dir_given_by_hydra_run_dir_is_continued_or_left_as_the_refusal_says(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    argv = [*SHORT, "trainer.max_epochs=2", f"hydra.run.dir={run_dir}"]
    line = _refused(_train(*argv))
    continued, new = overrides_in(line)
    assert (continued, new) == ("resume=auto", "hydra.run.dir=<empty dir>"), line
    # A new run: the command line names the run dir, so the new one is named there.
    empty = tmp_path / "new"
    _ok(_train(*applied(argv, fill(new, empty))))
    assert _results(empty)["finished_at"]["epoch"] == 2
    # Or the run in the dir goes on.
    proc = _ok(_train(*applied(argv, continued)))
    assert f"resume=auto: resuming from {run_dir / 'checkpoints'}" in proc.stdout
    assert _results(run_dir)["finished_at"]["epoch"] == 2


@pytest.mark.slow
def test_a_run_dir_named_by_run_id_is_left_for_a_new_run_id(tmp_path: Path) -> None:
    argv = [*SHORT, f"paths.log_dir={tmp_path}", "run_id=first"]
    _ok(_train(*argv))
    line = _refused(_train(*argv))
    new = overrides_in(after(line, "start a new run with"))[0]
    assert new == "run_id=<new name>", line
    _ok(_train(*applied(argv, fill(new, "second"))))
    assert _results(tmp_path / "train" / "runs" / "second")["finished_at"]["global_step"] == 2


@pytest.fixture
def held_run_dir(tmp_path: Path):
    """A run dir whose lock another live process holds, as a run still training would."""
    run_dir = tmp_path / "held"
    ready = tmp_path / "locked"
    code = (
        "import sys, time; from pathlib import Path; "
        "from trainwell.io.run_lock import lock_run_dir; "
        "lock_run_dir(Path(sys.argv[1])); Path(sys.argv[2]).write_text('held'); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(run_dir), str(ready)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "no lock taken"
            time.sleep(0.05)
        yield run_dir, holder
    finally:
        holder.kill()
        holder.wait()


def test_a_run_dir_in_use_is_left_for_a_new_one_or_continued_once_its_run_ended(
    held_run_dir, tmp_path: Path
) -> None:
    run_dir, holder = held_run_dir
    argv = [*SHORT, f"hydra.run.dir={run_dir}"]
    line = _refused(_train(*argv))
    assert f"in use by pid {holder.pid}" in line
    waited, new = overrides_in(line)
    assert (waited, new) == ("resume=auto", "hydra.run.dir=<empty dir>"), line
    other = tmp_path / "other"
    _ok(_train(*applied(argv, fill(new, other))))
    assert _results(other)["finished_at"]["global_step"] == 2
    holder.kill()  # "wait for that run to end (then resume=auto continues it)"
    holder.wait()
    proc = _ok(_train(*applied(argv, waited)))
    assert "resume=auto: no checkpoint in" in proc.stdout  # the holder had written none
    assert _results(run_dir)["finished_at"]["global_step"] == 2


def test_a_checkpoint_path_that_does_not_exist_gives_way_to_resume_auto(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    missing = run_dir / "checkpoints" / "lats.ckpt"
    argv = [*SHORT, "trainer.max_epochs=2", f"ckpt_path={missing}", f"hydra.run.dir={run_dir}"]
    line = _refused(_train(*argv))
    existing, auto = overrides_in(line)
    assert "in its place" in after(line, auto), line
    # resume=auto in ckpt_path's place
    proc = _ok(_train(*applied(argv, auto, dropping=["ckpt_path"])))
    assert f"resume=auto: resuming from {run_dir / 'checkpoints'}" in proc.stdout
    # or an existing checkpoint
    other = _copy(trained, tmp_path / "other")
    last = other / "checkpoints" / "last.ckpt"
    argv = [*argv[:-1], f"hydra.run.dir={other}"]
    _ok(_train(*applied(argv, fill(existing, last))))
    assert _results(other)["finished_at"]["epoch"] == 2


@pytest.mark.slow  # a run and two resumes, each a script run
def test_an_unreadable_checkpoint_gives_way_to_an_earlier_one_or_resume_auto(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    last = run_dir / "checkpoints" / "last.ckpt"
    cut = run_dir / "checkpoints" / "cut.ckpt"
    cut.write_bytes(last.read_bytes()[:5000])
    argv = [*SHORT, "trainer.max_epochs=2", f"ckpt_path={cut}", f"hydra.run.dir={run_dir}"]
    line = _refused(_train(*argv))
    earlier, auto = overrides_in(line)
    assert earlier == "ckpt_path=<file>" and auto == "resume=auto", line
    assert "in place of ckpt_path=" in line
    proc = _ok(_train(*applied(argv, auto, dropping=["ckpt_path"])))
    assert "resume=auto: skipping cut.ckpt (not a readable checkpoint" in proc.stderr
    assert f"resume=auto: resuming from {run_dir / 'checkpoints'}" in proc.stdout
    assert _results(run_dir)["finished_at"]["epoch"] == 2
    # eval.py names the earlier checkpoint alone: resume=auto is no way on for it
    eval_argv = [f"ckpt_path={cut}", f"hydra.run.dir={tmp_path / 'eval'}"]
    line = _refused(call_script("eval.py", *eval_argv))
    (earlier,) = overrides_in(line)
    _ok(call_script("eval.py", *applied(eval_argv, fill(earlier, last))))
    assert "test/acc" in _results(tmp_path / "eval")["metrics"]


# -- the training run's settings -----------------------------------------------------------------


def test_a_changed_batch_on_resume_goes_on_when_allowed_or_restored(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    saved = _results(trained)["plan"]["micro_batch"]
    argv = [
        *SHORT,
        "trainer.max_epochs=2",
        f"data.batch_size={saved // 2}",
        "resume=auto",
        f"hydra.run.dir={run_dir}",
    ]
    line = _refused(_train(*argv))
    restore = after(line, "restore").split(",")[0]
    assert restore.split(" / ") == [
        "data.batch_size",
        "trainer.accumulate_grad_batches",
        "trainer.devices",
    ]
    (allow,) = overrides_in(after(line, "or pass"))
    proc = _ok(_train(*applied(argv, allow)))
    assert "(continuing: resume_allow_batch_change=true)" in proc.stderr
    assert _results(run_dir)["plan"]["micro_batch"] == saved // 2
    # Restored, the batch the checkpoint was saved with resumes without the flag.
    again = _copy(trained, tmp_path / "again")
    argv = applied(argv, f"data.batch_size={saved}", f"hydra.run.dir={again}")
    _ok(_train(*argv))
    assert _results(again)["finished_at"]["epoch"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_fp16_on_cpu_runs_with_the_precision_the_refusal_names(
    precision: str, tmp_path: Path
) -> None:
    argv = [*SHORT, f"trainer.precision={precision}", f"hydra.run.dir={tmp_path / 'run'}"]
    line = _refused(_train(*argv))
    first, *others = after(line, "use").split(", ")
    (auto,) = overrides_in(first)
    assert auto == "trainer.precision=auto" and others == ["32-true or bf16-mixed"], line
    _ok(_train(*applied(argv, auto)))
    assert _results(tmp_path / "run")["finished_at"]["global_step"] == 2


@pytest.mark.slow
def test_a_monitored_metric_the_module_does_not_log_is_replaced_or_dropped(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, "monitor.metric=val/accuracy", f"hydra.run.dir={tmp_path / 'a'}"]
    line = _refused(_train(*argv))
    logged = after(line, "it logs").split(":")[0].split(", ")
    chosen, mode = overrides_in(after(line, ": set").split(", or train without")[0])
    assert "val/acc" in logged and mode == "monitor.mode=min|max", line
    fixed = [fill(chosen, "val/acc"), "monitor.mode=max"]
    _ok(_train(*applied(argv, *fixed)))
    assert (tmp_path / "a" / "checkpoints" / "best.ckpt").is_file()
    without = overrides_in(after(line, "train without both:"))
    assert without == ["monitor.metric=null", "callbacks.early_stopping=null"], line
    _ok(_train(*applied(argv, *without, f"hydra.run.dir={tmp_path / 'b'}")))
    assert _results(tmp_path / "b")["finished_at"]["global_step"] == 2
    saved = OmegaConf.load(tmp_path / "b" / ".hydra" / "config.yaml")
    assert saved.monitor.metric is None and saved.callbacks.early_stopping is None


# -- a module or datamodule missing what the run needs -------------------------------------------


def _editable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Path:
    """A test-owned module file `name`.py the test edits as the message says, importable by its
    name (forgotten again after the test: its next import reads the edited file)."""
    folder = tmp_path / "mine"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return path


def _edit(path: Path, old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (old, text)
    path.write_text(text.replace(old, new))
    monkeypatch.delitem(sys.modules, path.stem, raising=False)


@pytest.mark.slow
def test_a_datamodule_without_a_class_count_runs_with_either_fix_the_message_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _editable(
        tmp_path,
        monkeypatch,
        "wine_like",
        f"""\
        from {UNFINISHED} import DigitsWithoutClassCount


        class MyData(DigitsWithoutClassCount):
            pass
        """,
    )
    argv = [*SHORT, "data._target_=wine_like.MyData", f"hydra.run.dir={tmp_path / 'a'}"]
    line = _refused(_train(*argv))
    edit = after(line, "give it a").split("`")[1]
    (override,) = overrides_in(after(line, " or set"))
    assert edit == "num_classes = <n>" and override == "model.num_classes=<n>", line
    _ok(_train(*applied(argv, fill(override, 10))))
    assert _results(tmp_path / "a")["finished_at"]["global_step"] == 2
    _edit(mine, "    pass\n", f"    {fill(edit, 10)}\n", monkeypatch)
    _ok(_train(*applied(argv, f"hydra.run.dir={tmp_path / 'b'}")))
    assert _results(tmp_path / "b")["finished_at"]["global_step"] == 2


@pytest.mark.slow
def test_a_module_left_in_eval_trains_once_listed_or_its_eval_call_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _editable(
        tmp_path,
        monkeypatch,
        "frozen_body",
        """\
        from tests.owned.task import OwnedClassifier


        class MyTask(OwnedClassifier):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.net.body.eval()
        """,
    )
    argv = [*SHORT, "model._target_=frozen_body.MyTask", f"hydra.run.dir={tmp_path / 'a'}"]
    line = _refused(_train(*argv), code=1)  # the guard's RuntimeError: a crash, exit 1
    first = after(line, r"\(first:").split("`")[1]
    key = after(line, "list the module in").split()[0]
    assert (first, key) == ("net.body", "callbacks.train_mode_guard.allow_eval"), line
    _ok(_train(*applied(argv, f"{key}=[{first}]")))
    assert _results(tmp_path / "a")["finished_at"]["global_step"] == 2
    assert after(line, "inference mode while training;").startswith("remove the stray .eval()")
    _edit(mine, "        self.net.body.eval()\n", "", monkeypatch)
    _ok(_train(*applied(argv, f"hydra.run.dir={tmp_path / 'b'}")))


@pytest.mark.slow
def test_lr_scaling_without_an_lr_to_scale_runs_unscaled_as_the_refusal_says(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, "model.optimizer=null", "lr_scaling.rule=linear"]
    argv += [f"model._target_={UNFINISHED}.OwnLrClassifier", f"hydra.run.dir={tmp_path / 'a'}"]
    line = _refused(_train(*argv))
    (none,) = overrides_in(after(line, "; set"))
    assert none == "lr_scaling.rule=none", line
    _ok(_train(*applied(argv, none)))
    assert _results(tmp_path / "a")["plan"]["lr_rule"] == "none"


@pytest.mark.slow
def test_an_optimizer_built_with_its_own_lr_runs_unscaled_or_from_the_partial(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, "lr_scaling.rule=linear", f"model._target_={UNFINISHED}.OwnLrClassifier"]
    argv.append(f"hydra.run.dir={tmp_path / 'a'}")
    line = _refused(_train(*argv))
    (none,) = overrides_in(after(line, "or set"))
    assert none == "lr_scaling.rule=none", line
    _ok(_train(*applied(argv, none)))
    # The other way: the module builds its optimizer from the `_partial_` it is handed (the
    # engine tests' own task does): the run trains at the planned, scaled LR.
    assert "build it from the model.optimizer `_partial_` the template hands in" in line
    built = applied(
        argv, "model._target_=tests.owned.task.OwnedClassifier", f"hydra.run.dir={tmp_path / 'b'}"
    )
    _ok(_train(*built))
    plan = _results(tmp_path / "b")["plan"]
    assert plan["lr_rule"] == "linear" and plan["lr"] != plan["base_lr"]


@pytest.mark.slow
def test_a_loader_of_whole_batches_runs_with_the_settings_its_messages_name(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, "lr_scaling.rule=linear", f"data._target_={UNFINISHED}.WholeBatchesDigits"]
    argv += ["trainer.limit_train_batches=3", f"hydra.run.dir={tmp_path / 'a'}"]
    proc = _train(*argv, "callbacks.step_checkpoint.every_n_train_steps=1")
    line = _refused(proc)
    assert "the train loader's batch size is unknown" in line
    (none,) = overrides_in(after(line, "set"))
    # The loader is left as it is, with a warning naming how to keep checkpoints at epoch ends.
    (warned,) = [w for w in proc.stderr.splitlines() if "LoaderPolicyWarning" in w]
    (no_steps,) = overrides_in(after(warned, "resume exactly:"))
    assert (none, no_steps) == ("lr_scaling.rule=none", "callbacks.step_checkpoint=null"), line
    # With the rule's fix and step checkpoints on, a mid-epoch checkpoint is written ...
    steps = "callbacks.step_checkpoint.every_n_train_steps=1"
    _ok(_train(*applied(argv, none), steps))
    assert list((tmp_path / "a" / "checkpoints").glob("step-*.ckpt"))
    # ... and without them none: the checkpoints are the epoch ends', which resume exactly.
    _ok(_train(*applied(argv, none, no_steps, f"hydra.run.dir={tmp_path / 'b'}")))
    written = sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir())
    assert written == ["best.ckpt", "last.ckpt"]


# -- the doctor --------------------------------------------------------------------------------


def test_a_probe_that_raises_gives_its_traceback_with_the_variable_the_verdict_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.config import compose_config
    from trainwell.doctor.harness.context import DoctorContext
    from trainwell.doctor.harness.settings import ProbeSettings
    from trainwell.doctor.run import run_checks

    def broken_probe(ctx: DoctorContext, evidence: dict) -> None:
        raise KeyError("a key the probe never expected")

    monkeypatch.setattr("trainwell.doctor.run.CHECKS", {"probe.broken": broken_probe})
    cfg = compose_config(list(OWNED), tmp_path / "run", "doctor")
    ctx = DoctorContext(cfg, ProbeSettings.from_cfg(cfg.probe), workdir=tmp_path / "probes")
    (check,) = run_checks(ctx)
    assert check.status == "fail", check
    (variable,) = overrides_in(after(check.message, "run with"))
    name, value = variable.split("=")
    monkeypatch.setenv(name, value)
    with pytest.raises(KeyError, match="a key the probe never expected"):
        run_checks(ctx)


# -- eval, predict, export and serve -------------------------------------------------------------


def _script_of(command: list[str]) -> tuple[str, list[str]]:
    """(scripts/<name> as call_script takes it, its arguments) of a printed `python scripts/...`
    command, which must run from the repository root where a user reads it."""
    assert command[0] == "python" and (REPO / command[1]).is_file(), command
    assert Path(command[1]).parent == Path("scripts"), command
    return Path(command[1]).name, command[2:]


@DEFAULT_RUN  # runs the scripts on the default config: the digits example
@pytest.mark.parametrize("script", ["eval.py", "predict.py"])
def test_a_command_without_a_checkpoint_runs_on_the_one_the_message_names(
    script: str, trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    argv = [f"hydra.run.dir={tmp_path / 'own'}"]
    line = _refused(call_script(script, *argv))
    (named,) = overrides_in(after(line, "pass"))
    proc = _ok(call_script(script, *applied(argv, fill(named, run_dir))))
    if script == "eval.py":
        assert "test/acc" in _results(tmp_path / "own")["metrics"]
    else:
        assert f"predictions: {run_dir / 'predictions' / 'test.csv'}" in proc.stdout


def test_a_prediction_that_exists_is_replaced_with_the_flag_the_refusal_names(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    argv = [f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}", f"hydra.run.dir={tmp_path}/p"]
    _ok(call_script("predict.py", *argv))
    made = run_dir / "predictions" / "test.csv"
    made.write_text("kept until replaced\n")
    line = _refused(call_script("predict.py", *argv))
    (flag,) = overrides_in(after(line, "; pass"))
    _ok(call_script("predict.py", *applied(argv, flag)))
    assert made.read_text().startswith("index,prediction,")


@pytest.mark.slow
def test_input_that_is_not_npy_is_predicted_once_passed_as_the_npy_the_message_names(
    trained: Path, tmp_path: Path
) -> None:
    from sklearn.datasets import load_digits

    run_dir = _copy(trained, tmp_path / "run")
    samples = load_digits().images[:5]
    (tmp_path / "samples.png").write_bytes(b"")
    np.savetxt(tmp_path / "samples.csv", samples.reshape(5, -1), delimiter=",")
    argv = [f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}", f"hydra.run.dir={tmp_path}/p"]
    for given in ("samples.png", "samples.csv"):
        line = _refused(call_script("predict.py", *argv, f"input={tmp_path / given}"))
        assert after(line, ": pass a").startswith(".npy file"), line
    np.save(tmp_path / "samples.npy", samples)
    _ok(call_script("predict.py", *argv, f"input={tmp_path / 'samples.npy'}"))
    rows = (run_dir / "predictions" / "samples.csv").read_text().splitlines()
    assert len(rows) == 1 + 5


@pytest.mark.slow
@DEFAULT_RUN  # runs the scripts on the default config: the digits example
def test_a_checkpoint_that_is_missing_or_not_lightnings_gives_way_to_the_one_named(
    trained: Path, tmp_path: Path
) -> None:
    best = trained / "checkpoints" / "best.ckpt"
    other = tmp_path / "weights.pt"
    torch.save({"net": torch.zeros(2)}, other)
    for given in (tmp_path / "best.ckpt", other):
        argv = [f"ckpt_path={given}", f"hydra.run.dir={tmp_path / 'eval'}"]
        line = _refused(call_script("eval.py", *argv))
        if given == other:  # the file itself: "pass a .ckpt written by scripts/train.py"
            assert after(line, "; pass a").startswith(".ckpt written by scripts/train.py"), line
            argv = applied(argv, f"ckpt_path={best}")
        else:
            (named,) = overrides_in(after(line, "; pass"))
            argv = applied(argv, fill(named, best))
        _ok(call_script("eval.py", *argv))
        assert "test/acc" in _results(tmp_path / "eval")["metrics"]
        shutil.rmtree(tmp_path / "eval")


def _serve_problem(*argv: str) -> str | None:
    """What serve.py says about its command line before it starts a server (the export it would
    serve, verified file by file), or None: the check serve.py runs first."""
    from trainwell.deploy.artifact import served_export

    return check_command_line(CONF, "serve", list(argv), served_export)


@DEFAULT_RUN  # runs the scripts on the default config: the digits example
@pytest.mark.slow
def test_serve_without_an_export_serves_the_one_the_printed_command_makes(
    trained: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    run_dir = _copy(trained, logs / "train" / "runs" / "mine")
    best = run_dir / "checkpoints" / "best.ckpt"
    # No artifact: pass one, or artifact=latest.
    line = _serve_problem(f"paths.log_dir={logs}")
    assert line is not None
    named, latest = overrides_in(after(line, "pass"))
    assert latest == "artifact=latest", line
    # artifact=latest under a log dir without an export: the command that makes one.
    line = _serve_problem(latest, f"paths.log_dir={logs}")
    assert line is not None and line.startswith("no export under"), line
    script, args = _script_of(command_in(line, "python scripts/export.py"))
    # The export dir named, not there yet: the same command.
    line = _serve_problem(f"artifact={run_dir / 'export'}")
    assert line is not None and "export directory not found" in line, line
    assert _script_of(command_in(line, "python scripts/export.py")) == (script, args)
    # eval.py's sibling export.py, without a checkpoint, names the same one.
    line = _refused(call_script("export.py", f"hydra.run.dir={tmp_path / 'e'}"))
    (needed,) = overrides_in(after(line, "pass"))
    assert [fill(needed, run_dir)] == [fill(a, best) for a in args]
    _ok(call_script(script, *[fill(a, best) for a in args], f"hydra.run.dir={tmp_path / 'e'}"))
    assert _serve_problem(latest, f"paths.log_dir={logs}") is None
    assert _serve_problem(fill(named, run_dir), f"paths.log_dir={logs}") is None
    assert _serve_problem(f"artifact={run_dir / 'export'}") is None


@pytest.mark.slow  # two more exports: about 12 s
def test_an_export_of_another_checkpoint_or_without_manifest_is_made_again_as_printed(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = _copy(trained, tmp_path / "run")
    best, last = run_dir / "checkpoints" / "best.ckpt", run_dir / "checkpoints" / "last.ckpt"
    _ok(call_script("export.py", f"ckpt_path={best}", f"hydra.run.dir={tmp_path / 'e'}"))
    argv = [f"ckpt_path={last}", f"hydra.run.dir={tmp_path / 'e'}"]
    line = _refused(call_script("export.py", *argv))
    (flag,) = overrides_in(after(line, "; pass"))
    _ok(call_script("export.py", *applied(argv, flag)))
    manifest = json.loads((run_dir / "export" / "manifest.json").read_text())
    assert manifest["source_checkpoint"]["path"] == str(last)
    (run_dir / "export" / "manifest.json").unlink()
    line = _serve_problem(f"artifact={run_dir / 'export'}")
    assert line is not None and "is not a complete export" in line, line
    script, args = _script_of(command_in(line, "python scripts/export.py"))
    _ok(call_script(script, *[fill(a, last) if "<" in a else a for a in args], argv[1]))
    assert _serve_problem(f"artifact={run_dir / 'export'}") is None


def test_a_checkpoint_moved_out_of_its_run_dir_loads_from_where_the_message_says(
    trained: Path, tmp_path: Path
) -> None:
    from tests.owned.unfinished import LoadableClassifier
    from trainwell.deploy import load_trained
    from trainwell.errors import TrainwellError

    best = trained / "checkpoints" / "best.ckpt"
    moved = tmp_path / "best.ckpt"
    shutil.copy(best, moved)
    for load in (load_trained, LoadableClassifier.load_from_checkpoint):
        with pytest.raises(TrainwellError) as refused:
            load(moved)
        assert "inside a run dir written by scripts/train.py (<run dir>/checkpoints/" in str(
            refused.value
        ), refused.value
    # Put back where the message says, <run dir>/checkpoints/<name>.ckpt of its run:
    assert load_trained(best).training is False
    # The task class of another run's checkpoint names the loader that takes any task.
    with pytest.raises(TrainwellError) as other:
        LoadableClassifier.load_from_checkpoint(best)
    code = after(str(other.value), "use")
    assert code == f'trainwell.deploy.load_trained("{best}")', other.value
    import trainwell.deploy

    module = eval(code, {"trainwell": trainwell})  # the printed call, as printed
    assert type(module).__name__ == "OwnedClassifier" and module.training is False


@pytest.mark.slow
def test_a_datamodule_made_by_a_function_runs_with_the_class_count_the_message_names(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, f"data._target_={UNFINISHED}.owned_digits", f"hydra.run.dir={tmp_path}"]
    line = _refused(_train(*argv))
    (override,) = overrides_in(after(line, "; set"))
    _ok(_train(*applied(argv, fill(override, 10))))
    assert _results(tmp_path)["finished_at"]["global_step"] == 2


@pytest.mark.slow  # a run and the doctor's probes: about 10 s
def test_a_non_finite_loss_is_explained_by_the_doctor_run_with_the_same_overrides(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, f"data._target_={UNFINISHED}.NanDigits", f"hydra.run.dir={tmp_path / 'a'}"]
    line = _refused(_train(*argv), code=1)  # a crash of the run, not bad input
    command = command_in(line, "python scripts/doctor.py")
    checks = re.search(r"with the same overrides \(([^)]*)\)", line).group(1).split(", ")  # type: ignore[union-attr]
    assert command == ["python", "scripts/doctor.py"] and checks == ["data.finite", "grad.flow"]
    script, args = _script_of(command)
    proc = call_script(script, *args, *argv[:-1], f"hydra.run.dir={tmp_path / 'doctor'}")
    assert proc.returncode == 1, proc.stderr[-3000:]  # a check failed
    report = json.loads((tmp_path / "doctor" / "doctor" / "report.json").read_text())
    verdicts = {c["id"]: c for c in report["checks"]}
    assert verdicts["data.finite"]["status"] == "fail", verdicts["data.finite"]
    assert "NaN" in verdicts["data.finite"]["message"]


@pytest.mark.slow  # the doctor's preflight twice: about 10 s
def test_a_preflight_that_fails_lets_the_run_start_with_the_flag_it_names(tmp_path: Path) -> None:
    argv = [*SHORT, "model.net._target_=tests.owned.bugs.SoftmaxNet", "doctor=true"]
    argv.append(f"hydra.run.dir={tmp_path}")
    line = _refused(_train(*argv))
    assert line.startswith("error: doctor preflight failed 1 check(s) (first: loss.logits"), line
    (flag,) = overrides_in(after(line, "or set"))
    _ok(_train(*applied(argv, flag)))
    results = _results(tmp_path)
    assert results["finished_at"]["global_step"] == 2
    assert results["doctor_report"] == str(tmp_path / "doctor" / "report.json")


@pytest.mark.slow  # three runs of two FSDP ranks: about 40 s
def test_fsdp_runs_without_activation_checkpointing_and_counts_flops_once_declared(
    tmp_path: Path,
) -> None:
    """A net without a grad_checkpointing switch under activation checkpointing, and sharded
    parameters the FLOP counter cannot read: each message's fix, on two CPU ranks."""
    argv = [*SHORT, "trainer=fsdp_sim", "trainer.strategy.activation_checkpointing=true"]
    argv += [f"model._target_={UNFINISHED}.ShardedClassifier", "trainer.log_every_n_steps=1"]

    def run(*overrides: str) -> subprocess.CompletedProcess:
        return run_script("train.py", *overrides, env=TESTS_IMPORTABLE, timeout=300)

    line = _refused(run(*argv, f"hydra.run.dir={tmp_path / 'a'}"))
    (off,) = overrides_in(after(line, "; set"))
    proc = _ok(run(*applied(argv, off), f"hydra.run.dir={tmp_path / 'b'}"))
    (said,) = [s for s in (proc.stdout + proc.stderr).splitlines() if "sharded parameters" in s]
    assert after(said, "set").split("`")[1] == "flops_per_batch", said
    # The edit it names: the module declares flops_per_batch (CountedShardedClassifier).
    counted = applied(argv, off, f"model._target_={UNFINISHED}.CountedShardedClassifier")
    _ok(run(*counted, f"hydra.run.dir={tmp_path / 'c'}"))
    header = (tmp_path / "c" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "throughput/flops_per_sec" in header, header
    before = (tmp_path / "b" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "throughput/flops_per_sec" not in before, before


def test_the_gradient_plot_draws_non_finite_norms_as_missing_ones(tmp_path: Path) -> None:
    """The doctor run the non-finite guard names must reach its report on the very data that
    stopped the run: a NaN gradient norm once stopped the plot's log axis, and the report."""
    from trainwell.doctor.report.plots import grad_norms

    norms = {"net.body.1.weight": float("nan"), "net.head.weight": float("nan")}
    grad_norms(norms, tmp_path)
    assert (tmp_path / "grad_norms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _python_without_torch() -> str | None:
    """An interpreter that cannot import the project's dependencies (the venv's base python)."""
    for candidate in (Path(sys.base_prefix) / "bin" / "python3", Path("/usr/bin/python3")):
        if candidate.is_file():
            probe = subprocess.run([str(candidate), "-c", "import torch"], capture_output=True)
            if probe.returncode != 0:
                return str(candidate)
    return None


@pytest.mark.slow  # two fresh interpreters importing torch: about 20 s
def test_a_script_started_by_another_python_runs_with_the_venvs_as_the_line_says(
    tmp_path: Path,
) -> None:
    bare = _python_without_torch()
    venv = REPO / ".venv" / "bin" / "python"
    if bare is None or not venv.exists():
        pytest.skip("needs .venv and a python without the project's dependencies")
    argv = [*SHORT, f"hydra.run.dir={tmp_path / 'a'}"]
    proc = subprocess.run(
        [bare, "scripts/train.py", *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    line = _refused(proc)
    # "run `make train` once to set up .venv" installs; the .venv is there already here.
    used = after(line, "then use").split()[0]
    activate = re.search(r"`(source \S+)`", line).group(1)  # type: ignore[union-attr]
    assert used == ".venv/bin/python", line
    env = {**os.environ, **TESTS_IMPORTABLE}
    proc = subprocess.run(
        [used, "scripts/train.py", *argv], cwd=REPO, env=env, capture_output=True, text=True
    )
    _ok(proc)
    again = shlex.join([*argv[:-1], f"hydra.run.dir={tmp_path / 'b'}"])
    shell = f"{activate} && python scripts/train.py {again}"
    proc = subprocess.run(
        ["bash", "-c", shell], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    _ok(proc)
    assert _results(tmp_path / "b")["finished_at"]["global_step"] == 2


def test_a_probe_batch_too_small_to_split_is_probed_at_the_size_the_check_names(
    tmp_path: Path,
) -> None:
    """The doctor's own override: probe.batch_size (with the train batch size) as the skip
    says; the check then judges the batch instead of skipping."""
    from tests.helpers.doctor import QUICK_PROBES, run_ids

    small = [*OWNED, *QUICK_PROBES, "probe.batch_size=2", "data.batch_size=2"]
    (check,) = run_ids(tmp_path / "a", small, ["eval.batch_independence"]).values()
    assert check.status == "skip", check
    found = re.search(
        r"set (probe\.batch_size) \(and (the train batch size)\) to (\d+) or more", check.message
    )
    assert found, check.message
    size = found.group(3)
    bigger = applied(small, f"{found.group(1)}={size}", f"data.batch_size={size}")
    (check,) = run_ids(tmp_path / "b", bigger, ["eval.batch_independence"]).values()
    assert check.status == "pass", check


@pytest.mark.slow  # two runs: about 4 s
def test_a_fitted_object_in_a_datamodules_state_runs_once_its_arrays_are_kept_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _editable(
        tmp_path,
        monkeypatch,
        "scaled",
        """\
        from sklearn.preprocessing import StandardScaler

        from tests.owned.data import OwnedDigits


        class MyData(OwnedDigits):
            def setup(self, stage=None):
                super().setup(stage)
                images, _ = self._load()
                self.scaler = StandardScaler().fit(images[self.splits["train"]].reshape(-1, 64))

            def state_dict(self):
                return {"scaler": self.scaler}

            def load_state_dict(self, state):
                self.scaler = state["scaler"]
        """,
    )
    argv = [*SHORT, "data._target_=scaled.MyData", f"hydra.run.dir={tmp_path / 'a'}"]
    line = _refused(_train(*argv))
    assert "StandardScaler, which a checkpoint cannot hold" in line, line
    kept = after(line, "such as a scaler's").split(",")[0]
    assert kept == "mean_ and scale_", line
    # The edit, as worded: the fitted object's arrays in the state, not the object.
    _edit(mine, '        return {"scaler": self.scaler}\n',
          '        return {"mean_": self.scaler.mean_, "scale_": self.scaler.scale_}\n', monkeypatch)  # fmt: skip
    _edit(mine, '        self.scaler = state["scaler"]\n',
          '        self.scaler = StandardScaler()\n'
          '        self.scaler.mean_, self.scaler.scale_ = state["mean_"], state["scale_"]\n',
          monkeypatch)  # fmt: skip
    _ok(_train(*applied(argv, f"hydra.run.dir={tmp_path / 'b'}")))
    from trainwell.io.checkpoint_read import load_checkpoint_file

    saved = load_checkpoint_file(tmp_path / "b" / "checkpoints" / "last.ckpt")["MyData"]
    assert type(saved["mean_"]) is np.ndarray and saved["scale_"].shape == (64,)


@pytest.mark.slow  # a run and two evaluations: about 4 s
def test_eval_of_a_module_without_test_step_runs_once_the_hook_is_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _editable(
        tmp_path,
        monkeypatch,
        "untested",
        """\
        import lightning as L

        from tests.owned.task import OwnedClassifier


        class MyTask(OwnedClassifier):
            test_step = L.LightningModule.test_step
        """,
    )
    run_dir = tmp_path / "run"
    _ok(_train(*SHORT, "model._target_=untested.MyTask", f"hydra.run.dir={run_dir}"))
    argv = [f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}", f"hydra.run.dir={tmp_path}/e"]
    line = _refused(call_script("eval.py", *argv))
    missing = after(line, "eval.py cannot test").split(": ", 1)[1].split(" (")[0]
    assert missing == "MyTask defines no test_step" and "add them" in line, line
    _edit(mine, "    test_step = L.LightningModule.test_step\n",
          "    def test_step(self, batch, batch_idx):\n"
          "        self._evaluate(batch, 'test')\n", monkeypatch)  # fmt: skip
    _ok(call_script("eval.py", *argv))
    assert "test/acc" in _results(tmp_path / "e")["metrics"]


@pytest.mark.slow  # three runs: about 5 s
def test_batchnorm_under_accumulation_names_the_switch_only_where_the_net_has_one(
    tmp_path: Path,
) -> None:
    argv = [*SHORT, f"model.net._target_={UNFINISHED}.NormNet", "+model.net.norm=batch"]
    argv += ["trainer.accumulate_grad_batches=2", "trainer.limit_train_batches=4"]

    def warned(proc: subprocess.CompletedProcess) -> list[str]:
        return [w for w in proc.stderr.splitlines() if "BatchNorm normalises over" in w]

    (line,) = warned(_ok(_train(*argv, f"hydra.run.dir={tmp_path / 'a'}")))
    (switch,) = overrides_in(after(line, "consider"))
    assert switch == "model.net.norm=group", line
    fixed = _ok(_train(*applied(argv, "+" + switch), f"hydra.run.dir={tmp_path / 'b'}"))
    assert warned(fixed) == []
    # A net without the switch: no override it would refuse, the layer to use instead.
    mine = applied(
        argv, f"model.net._target_={UNFINISHED}.BatchNormNet", dropping=["model.net.norm"]
    )
    (line,) = warned(_ok(_train(*mine, f"hydra.run.dir={tmp_path / 'c'}")))
    assert overrides_in(line) == [] and "consider GroupNorm or LayerNorm in the net" in line, line
