"""Command-line mistakes: one line naming the cause and the nearest valid name, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.helpers.config import CONF, with_baseline
from tests.helpers.scripts import run_script
from trainwell.command_line import check_command_line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["trainer.max_epoch=3"], "did you mean 'trainer.max_epochs'?"),
        (["traner.max_epochs=3"], "did you mean 'trainer.max_epochs'?"),
        (["data.batch_sze=8"], "did you mean 'data.batch_size'?"),
        (["trainer=cpux"], "did you mean trainer=cpu?"),
        pytest.param(
            ["experiment=resnet"],
            "did you mean experiment=resnet_accum?",
            marks=pytest.mark.example("project.data.cifar10", "project.models.resnet"),
        ),
        (["logger=wandbb"], "did you mean logger=wandb?"),
        (["seed=1,2"], "add --multirun"),
    ],
)
def test_typos_get_one_line_with_the_nearest_name(argv: list[str], expected: str) -> None:
    message = check_command_line(CONF, "train", with_baseline(argv))
    assert message is not None and "\n" not in message
    assert expected in message, message


@pytest.mark.example("project.data.synthetic")
def test_valid_command_lines_pass_untouched() -> None:
    argv = ["trainer.max_epochs=3", "data=synthetic", "hydra.run.dir=/tmp/x", "+extra.key=1"]
    assert check_command_line(CONF, "train", with_baseline(argv)) is None
    assert (
        check_command_line(CONF, "train", with_baseline(["-m", "seed=1,2"])) is None
    )  # Hydra's multirun


def test_train_script_exits_2_with_the_suggestion_and_writes_nothing(tmp_path: Path) -> None:
    proc = run_script("train.py", "trainer.max_epoch=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == (
        "error: unknown config key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'? "
        "(add a new key with +trainer.max_epoch=...)"
    ), proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_multirun_with_ddp_gives_one_dir_per_job_not_per_rank(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_script(
        "train.py",
        "-m",
        "trainer=ddp_sim",
        "seed=1,2",
        "trainer.max_epochs=1",
        "test=false",
        "print_config=false",
        "callbacks.rich_progress_bar=null",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for job in ("0", "1"):
        assert (sweep / job / "results.json").is_file()
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "logs").exists()  # no rank wandered off into a run dir of its own
    assert proc.stdout.count("training plan:") == 2  # two jobs, not a sweep per rank


def test_launcher_slurm_composes_without_a_cluster() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["launcher=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.signal_delay_s == 90 and cfg.resume == "auto"
    assert launcher.additional_parameters.requeue is True
