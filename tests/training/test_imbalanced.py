"""The imbalanced-classes path end to end: docs/running.md's commands compose, and a weighted-sampler
run resumed from a mid-epoch step checkpoint ends bitwise equal to the uninterrupted run."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from hydra.utils import instantiate

from tests.helpers.config import QUIET_RUN, REPO, compose_config
from tests.helpers.kill_runs import IN_PROCESS_RUN
from tests.helpers.state import assert_bitwise_equal, load_checkpoint
from trainwell.training.run import train

pytestmark = pytest.mark.example(
    "project.data.digits", "project.models.digits_cnn", "project.tasks.classification"
)


def readme_commands() -> list[list[str]]:
    section = (REPO / "docs" / "running.md").read_text().split("## Imbalanced classes", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.strip().splitlines():
        words = shlex.split(line.split("#", 1)[0])
        assert words[:2] == ["python", "scripts/train.py"], line
        commands.append(words[2:])
    return commands


@pytest.mark.parametrize("overrides", readme_commands(), ids=" ".join)
def test_the_readme_commands_compose_and_build(overrides: list[str], tmp_path: Path) -> None:
    cfg = compose_config(overrides, tmp_path)
    datamodule = instantiate(cfg.data)
    assert datamodule.rare_classes == [5, 6, 7, 8, 9] and datamodule.rare_fraction == 0.1
    instantiate(cfg.model)


def test_class_weights_elsewhere_are_added_and_the_shared_config_hands_no_loss(
    tmp_path: Path,
) -> None:
    # a model._target_ of the user's own gets the shared model config's keys: never `loss`
    assert "loss" not in compose_config([], tmp_path).model
    cfg = compose_config(["+model.loss.class_weights=balanced"], tmp_path)
    assert instantiate(cfg.model)._class_weights_rule == "balanced"


RUN = [
    "experiment=digits_imbalanced",
    "data.sampler=weighted",
    *IN_PROCESS_RUN,
    "data.samples_per_epoch=900",  # 8 micro-batches of 128 (the cut split has 694 samples)
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("weighted") / "run"
    every_step = [
        "callbacks.step_checkpoint.every_n_train_steps=1",
        "callbacks.step_checkpoint.save_top_k=-1",
    ]
    train(compose_config([*RUN, *every_step], run_dir))
    return run_dir


@pytest.mark.parametrize("step", [1, 2, 4])  # windows of 3, 3, 2: mid-epoch 0 and mid-epoch 1
def test_a_weighted_run_resumed_mid_epoch_is_bitwise_equal(
    uninterrupted: Path, tmp_path: Path, step: int
) -> None:
    source = uninterrupted / "checkpoints" / f"step-{step:07d}.ckpt"
    loader = load_checkpoint(source)["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert 0 < loader["batches"] < loader["epoch_batches"] == 8  # really mid-epoch
    run_dir = tmp_path / "resumed"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(source, run_dir / "checkpoints" / source.name)
    resumed = train(compose_config([*RUN, "resume=auto"], run_dir))
    got = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert_bitwise_equal(got, load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt"))
    want = load_checkpoint(uninterrupted / "checkpoints" / "last.ckpt")["callbacks"]
    assert (
        resumed["metrics"]["val/balanced_acc"]
        == (want["ExactResume"]["callback_metrics"]["val/balanced_acc"])
    )


def test_a_run_that_never_recognises_a_class_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = [
        "data._target_=tests.doctor.museum.MajorityDigits",  # 99% class 0
        "trainer.max_epochs=1",
        "model.net.width=8",
        *QUIET_RUN,
    ]
    results = train(compose_config(overrides, tmp_path / "run"))
    zero = [k for k, v in results["metrics"].items() if k.startswith("test/recall/") and v == 0]
    assert zero  # the premise: some class is never predicted right
    lines = [line for line in capsys.readouterr().out.splitlines() if "recall 0 on class" in line]
    assert len(lines) == 1 and all(k.rsplit("/", 1)[1] in lines[0] for k in zero)
