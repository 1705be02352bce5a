"""EMA of the weights (`ema.decay`), on the engine tests' own smooth modules (no BatchNorm, so
equal gradients give equal weights): once per optimizer step whatever the accumulation, in every
checkpoint beside the trained weights and its update count, continued bitwise by a resume from a
mid-epoch step checkpoint, used by validation, test and eval.py, and said in results.json.

In-process runs of training.run.train (a few seconds each); the slow tests do the same with
real SIGKILLs (test_ema_kill_resume.py) and real ranks (test_ema_ranks.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.config import OWNED_SMOOTH_SGD, QUIET_RUN, compose_config
from tests.helpers.state import assert_same_results_elsewhere, load_checkpoint
from trainwell.errors import TrainwellError
from trainwell.training.evaluate import evaluate
from trainwell.training.run import train

pytestmark = pytest.mark.engine

DECAY = 0.9  # far enough from 1 that the average and the weights differ clearly in a short run
# 1257 training digits: batches of 64 -> 20 optimizer steps per epoch, the last on 41 samples.
EXACT = [
    *OWNED_SMOOTH_SGD,
    *QUIET_RUN,
    "trainer.max_epochs=2",
    "logger=csv",
    f"ema.decay={DECAY}",
]
STEPS = 2 * 20


def _run(run_dir: Path, *overrides: str) -> tuple[dict, dict]:
    results = train(compose_config([*EXACT, *overrides], run_dir))
    return results, load_checkpoint(run_dir / "checkpoints" / "last.ckpt")


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def one_batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """K=1, batches of 64, a step checkpoint after every optimizer step (all kept)."""
    run_dir = tmp_path_factory.mktemp("k1") / "run"
    every_step = (
        "callbacks.step_checkpoint.every_n_train_steps=1",
        "callbacks.step_checkpoint.save_top_k=-1",
    )
    return run_dir, *_run(run_dir, "data.batch_size=64", *every_step)


def test_k4_micro_batches_of_16_average_as_k1_batches_of_64(
    one_batch: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    _, _, want = one_batch
    _, got = _run(tmp_path / "k4", "data.batch_size=16", "trainer.accumulate_grad_batches=4")
    assert got["global_step"] == want["global_step"] == STEPS
    # Once per optimizer step: 40 updates, not one per micro-batch (158).
    assert int(got["averaging_state"]["n_averaged"]) == STEPS
    assert int(want["averaging_state"]["n_averaged"]) == STEPS
    assert _max_diff(got["state_dict"], want["state_dict"]) <= 1e-6  # the averages
    assert _max_diff(got["current_model_state"], want["current_model_state"]) <= 1e-6


def test_the_checkpoint_holds_the_average_the_trained_weights_and_the_count(
    one_batch: tuple[Path, dict, dict],
) -> None:
    _, _, last = one_batch
    averaged, trained = last["state_dict"], last["current_model_state"]
    assert averaged.keys() == trained.keys()
    assert _max_diff(averaged, trained) > 1e-3  # the average is not the weights
    assert last["callbacks"]["ExactEMA"] == {"latest_update_step": STEPS, "decay": DECAY}


def test_the_average_is_the_ema_of_the_trained_weights_of_every_step(
    one_batch: tuple[Path, dict, dict],
) -> None:
    """From the step checkpoints: average_s = decay * average_(s-1) + (1 - decay) * weights_s,
    the first update a copy."""
    run_dir, _, _ = one_batch
    steps = {s: load_checkpoint(p) for s, p in _step_checkpoints(run_dir).items()}
    assert len(steps) >= 10
    first = steps[1]
    assert _max_diff(first["state_dict"], first["current_model_state"]) == 0.0
    for s in sorted(steps):
        if s - 1 not in steps:
            continue
        before, now = steps[s - 1]["state_dict"], steps[s]
        expected = {
            k: torch.lerp(before[k], now["current_model_state"][k], 1 - DECAY) for k in before
        }
        assert _max_diff(now["state_dict"], expected) <= 1e-6, s
        assert int(now["averaging_state"]["n_averaged"]) == s


def _step_checkpoints(run_dir: Path) -> dict[int, Path]:
    return {int(p.stem.split("-")[1]): p for p in (run_dir / "checkpoints").glob("step-*.ckpt")}


@pytest.mark.parametrize("step", [3, 27])  # mid-epoch 0, mid-epoch 1
def test_a_resume_from_a_mid_epoch_step_checkpoint_continues_both_bitwise(
    one_batch: tuple[Path, dict, dict], tmp_path: Path, step: int
) -> None:
    run_dir, results, want = one_batch
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(_step_checkpoints(run_dir)[step], resumed / "checkpoints")
    got_results, got = _run(resumed, "data.batch_size=64", "resume=auto")
    for key in ("state_dict", "current_model_state"):
        for name, value in want[key].items():
            assert torch.equal(got[key][name], value), (key, name)
    assert torch.equal(got["averaging_state"]["n_averaged"], want["averaging_state"]["n_averaged"])
    assert got["callbacks"]["ExactEMA"] == want["callbacks"]["ExactEMA"]
    assert_same_results_elsewhere(got_results, results)


def test_results_say_which_weights_the_metrics_come_from(
    one_batch: tuple[Path, dict, dict],
) -> None:
    run_dir, _, _ = one_batch
    written = json.loads((run_dir / "results.json").read_text())
    assert written["weights"] == {
        "train": "trained",
        "val": "ema",
        "test": "ema",
        "ema": {"decay": DECAY, "updates": STEPS},
    }


def test_eval_of_best_ckpt_reproduces_the_test_metric_on_the_average(
    one_batch: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    run_dir, results, _ = one_batch
    best = run_dir / "checkpoints" / "best.ckpt"
    evaluated = evaluate(
        compose_config([*EXACT, f"ckpt_path={best}"], tmp_path / "eval", config_name="eval")
    )
    for name in ("test/acc", "test/loss"):
        assert evaluated["metrics"][name] == results["metrics"][name], name
    assert evaluated["weights"] == {"test": "ema"}
    # ... and the average is what it tested: the trained weights score otherwise.
    checkpoint = load_checkpoint(best)
    assert _max_diff(checkpoint["state_dict"], checkpoint["current_model_state"]) > 1e-3


def test_an_average_never_updated_validates_tests_and_ships_the_trained_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An update start past the run's last step: no validation, test, best.ckpt or eval sees the
    fit-start copy Lightning would swap in; the run is the run without EMA, and says so."""
    short = ("trainer.max_epochs=1", "callbacks.step_checkpoint=null")
    plain = train(compose_config([*EXACT, *short, "ema.decay=null"], tmp_path / "plain"))
    capsys.readouterr()
    late = tmp_path / "late"
    results = train(compose_config([*EXACT, *short, "ema.update_starting_at_step=1000"], late))
    printed = capsys.readouterr().out
    assert "ema: the average is never updated in this run (20 optimizer steps planned" in printed
    assert results["metrics"] == plain["metrics"]
    assert results["weights"] == {
        "train": "trained", "val": "trained", "test": "trained",
        "ema": {"decay": DECAY, "updates": 0},
    }  # fmt: skip
    best = load_checkpoint(late / "checkpoints" / "best.ckpt")
    want = load_checkpoint(tmp_path / "plain" / "checkpoints" / "best.ckpt")["state_dict"]
    for name, value in want.items():
        assert torch.equal(best["state_dict"][name], value), name
    evaluated = evaluate(
        compose_config([*EXACT, f"ckpt_path={late / 'checkpoints' / 'best.ckpt'}"],
                       tmp_path / "eval", config_name="eval")
    )  # fmt: skip
    assert evaluated["weights"] == {"test": "trained"}


def test_a_best_epoch_before_the_first_update_is_said_to_be_the_trained_weights(
    tmp_path: Path,
) -> None:
    """The average starts at step 25 of 40; judged by its lowest val/acc, the best epoch is the
    first (step 20), validated on the trained weights: results.json says so."""
    overrides = ["ema.update_starting_at_step=25", "monitor.metric=val/acc", "monitor.mode=min"]
    overrides.append("test=false")
    results = train(compose_config([*EXACT, *overrides], tmp_path))
    assert results["best_epoch"]["epoch"] == 0
    assert results["weights"]["val"] == "trained" and results["weights"]["ema"]["updates"] == 15
    best = load_checkpoint(tmp_path / "checkpoints" / "best.ckpt")
    assert int(best["averaging_state"]["n_averaged"]) == 0


def test_a_decay_longer_than_the_run_is_said_at_launch() -> None:
    """The average a short run ends with is mostly its first update's weights: said with a decay
    that averages the run instead; nothing said where the decay fits the run."""
    from trainwell.callbacks.ema import horizon_line, planned_updates

    assert planned_updates(40, None, 1) == 40
    assert planned_updates(40, 30, 4) == 2  # of steps 0-39: 32 and 36
    assert planned_updates(40, 39, 1) == 1 and planned_updates(40, 40, 1) == 0
    line = horizon_line(0.999, 400, None, 1)
    assert line is not None and "weigh 67% of the final average" in line
    assert "ema.decay=0.9886 or lower" in line
    assert horizon_line(0.9886, 400, None, 1) is None
    assert horizon_line(0.9, 40, None, 1) is None
    assert horizon_line(0.999, float("inf"), None, 1) is None
    assert "never updated" in horizon_line(0.9, 40, 40, 1)


def test_a_run_without_ema_says_its_weights_are_the_trained_ones(tmp_path: Path) -> None:
    results = train(
        compose_config([*EXACT, "ema.decay=null", "trainer.max_epochs=1", "test=false"], tmp_path)
    )
    # test=false: no test ran, so results.json names no weights for one.
    assert results["weights"] == {"train": "trained", "val": "trained"}
    last = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert "current_model_state" not in last and "averaging_state" not in last


def test_resuming_an_ema_checkpoint_without_ema_is_refused_and_resumes_as_the_refusal_says(
    one_batch: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    run_dir, _, _ = one_batch
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(_step_checkpoints(run_dir)[3], resumed / "checkpoints")
    with pytest.raises(TrainwellError, match=f"resume it with ema.decay={DECAY}") as refused:
        train(compose_config([*EXACT, "ema.decay=null", "resume=auto"], resumed))
    again = str(refused.value).rsplit("resume it with ", 1)[1]
    results = train(compose_config([*EXACT, again, "resume=auto", "test=false"], resumed))
    assert results["weights"]["ema"]["decay"] == DECAY


def test_an_ema_checkpoint_that_records_no_decay_asks_for_it_and_resumes_once_given(
    one_batch: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    run_dir, _, _ = one_batch
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    checkpoint = torch.load(_step_checkpoints(run_dir)[3], weights_only=True)
    checkpoint["callbacks"] = {}  # written by a callback that kept no decay of its own
    torch.save(checkpoint, resumed / "checkpoints" / "last.ckpt")
    with pytest.raises(TrainwellError, match=re.escape("resume it with ema.decay=<its decay>")):
        train(compose_config([*EXACT, "ema.decay=null", "resume=auto"], resumed))
    results = train(
        compose_config([*EXACT, f"ema.decay={DECAY}", "resume=auto", "test=false"], resumed)
    )
    assert results["weights"]["ema"]["decay"] == DECAY


def test_a_bad_decay_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(TrainwellError, match=r"ema.decay=1.5 is not in \[0, 1\]"):
        train(compose_config([*EXACT, "ema.decay=1.5"], tmp_path))


def test_a_preempted_run_saves_the_average_and_resumes_both_bitwise(
    one_batch: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    from trainwell.callbacks.preemption import Preempted

    _, results, want = one_batch
    sigterm = [
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        "+callbacks.killer.batch=5",
        "+callbacks.killer.signal=SIGTERM",
    ]
    with pytest.raises(Preempted):
        _run(tmp_path, "data.batch_size=64", *sigterm)
    saved = load_checkpoint(tmp_path / "checkpoints" / "preempt.ckpt")
    assert int(saved["averaging_state"]["n_averaged"]) == saved["global_step"] == 6
    got_results, got = _run(tmp_path, "data.batch_size=64", "resume=auto")
    for key in ("state_dict", "current_model_state"):
        for name, value in want[key].items():
            assert torch.equal(got[key][name], value), (key, name)
    assert got_results["metrics"] == results["metrics"]
