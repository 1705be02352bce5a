"""Every checkpoint trainwell writes loads with weights_only=True, whatever a module passes to
`save_hyperparameters()`: nets, optimizer / scheduler partials, omegaconf containers.

The modules (tests/helpers/foreign_modules.py) are written as public projects write them; the
runs go through the real scripts. A checkpoint written elsewhere, holding pickled objects, is
refused with one line naming the object and the way out.
"""

from __future__ import annotations

import enum
import functools
import io
import json
import signal
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.foreign_modules import HYDRA_TEMPLATE, WIDTHS, HydraTemplateModule
from tests.helpers.scripts import TESTS_IMPORTABLE, call_script, run_script
from tests.helpers.state import assert_bitwise_equal, final_state, load_checkpoint, metrics
from tests.helpers.trainers import quiet_trainer
from trainwell.io.checkpoint_read import CheckpointError, load_checkpoint_file
from trainwell.io.checkpoint_write import AtomicCheckpointIO
from trainwell.io.hparams import describe, plain_checkpoint
from trainwell.io.hparams import main as hparams_main
from trainwell.training.plan_callback import PlannedFactory

QUICK = (
    "trainer.max_epochs=2",
    "trainer.deterministic=true",
    "trainer.num_sanity_val_steps=0",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "print_config=false",
)


def _round_trip(checkpoint: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


class Colour(enum.Enum):
    RED = 1


def test_objects_become_their_config_or_a_description_and_nothing_else_changes() -> None:
    net = nn.Linear(3, 2)
    adam = functools.partial(torch.optim.Adam, lr=0.001)
    hparams = {
        "net": net,
        "optimizer": PlannedFactory(adam, None, "lr", "lr"),  # type: ignore[arg-type]
        "scheduler": functools.partial(torch.optim.lr_scheduler.StepLR, step_size=2),
        "widths": OmegaConf.create([32, 16]),
        "optim": OmegaConf.create({"lr": 0.1, "nested": {"momentum": 0.9}}),
        "deep": {"loss": nn.CrossEntropyLoss(), "tags": ("a", 1)},
        "colour": Colour.RED,
        "plain": {"lr": 0.1, "names": ["x"], "dtype": torch.float32},
    }
    checkpoint = {"state_dict": {"w": torch.ones(2)}, "hyper_parameters": hparams, "epoch": 3}
    config = {"model": {"scheduler": {"_target_": "torch.optim.lr_scheduler.StepLR"}}}
    plain, converted = plain_checkpoint(checkpoint, config)

    loaded = _round_trip(plain)  # the whole point: a weights-only load accepts it
    got = loaded["hyper_parameters"]
    assert got["net"] == "<nn.Module Linear>"
    assert got["optimizer"] == "<partial torch.optim.adam.Adam(lr=0.001)>"
    assert got["scheduler"] == {"_target_": "torch.optim.lr_scheduler.StepLR"}  # its config
    assert got["widths"] == [32, 16] and type(got["widths"]) is list
    assert got["optim"] == {"lr": 0.1, "nested": {"momentum": 0.9}}
    assert got["deep"] == {"loss": "<nn.Module CrossEntropyLoss>", "tags": ("a", 1)}
    assert got["colour"] == "Colour.RED"
    assert got["plain"] == hparams["plain"]
    assert {c.split(" ")[0] for c in converted} == {
        "net", "optimizer", "scheduler", "widths", "optim", "deep.loss", "colour",
    }  # fmt: skip
    # Nothing but the hparams changes, and the caller's objects are untouched.
    assert plain["state_dict"] is checkpoint["state_dict"] and plain["epoch"] == 3
    assert checkpoint["hyper_parameters"]["net"] is net and hparams["widths"] == [32, 16]


def test_an_omegaconf_hparams_container_loses_its_pickled_type() -> None:
    hparams = OmegaConf.create({"hidden": [8], "optim": {"lr": 0.1}})
    checkpoint = {"state_dict": {}, "hyper_parameters": hparams, "hparams_type": type(hparams)}
    checkpoint["datamodule_hyper_parameters"] = OmegaConf.create({"batch_size": 4})
    checkpoint["datamodule_hparams_type"] = type(hparams)
    plain, converted = plain_checkpoint(checkpoint)
    loaded = _round_trip(plain)
    assert loaded["hyper_parameters"] == {"hidden": [8], "optim": {"lr": 0.1}}
    assert loaded["datamodule_hyper_parameters"] == {"batch_size": 4}
    assert "hparams_type" not in loaded and "datamodule_hparams_type" not in loaded
    assert converted


def test_descriptions_are_short_and_name_the_object() -> None:
    assert describe(functools.partial(sorted, key=len)) == "<partial sorted(key=<function len>)>"
    assert describe(nn.Sequential) == "<class torch.nn.modules.container.Sequential>"
    assert len(describe(functools.partial(max, *range(200)))) <= 160


def _fit_and_save(tmp_path: Path) -> tuple[HydraTemplateModule, Path, AtomicCheckpointIO]:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    module = HydraTemplateModule(
        net=nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)),
        optimizer=functools.partial(torch.optim.Adam, lr=0.01),
        scheduler=None,
        compile=False,
    )
    checkpoint_io = AtomicCheckpointIO()
    trainer = quiet_trainer(max_epochs=2, plugins=[checkpoint_io])
    trainer.fit(module, DataLoader(data, batch_size=8))
    path = tmp_path / "saved.ckpt"
    trainer.save_checkpoint(path)
    trainer.save_checkpoint(tmp_path / "again.ckpt")
    return module, path, checkpoint_io


def test_a_checkpoint_of_a_module_with_object_hparams_loads_weights_only_with_every_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, path, _ = _fit_and_save(tmp_path)
    saved = load_checkpoint(path)
    assert saved["hyper_parameters"]["net"] == "<nn.Module Sequential>"
    assert saved["hyper_parameters"]["optimizer"] == "<partial torch.optim.adam.Adam(lr=0.01)>"
    assert saved["hyper_parameters"]["compile"] is False
    trained = module.state_dict()
    assert saved["state_dict"].keys() == trained.keys()
    for key, value in trained.items():
        assert torch.equal(saved["state_dict"][key], value), key
    assert saved["optimizer_states"][0]["state"] and saved["loops"]["fit_loop"]
    # The module keeps its objects: configure_optimizers still calls the partial.
    assert isinstance(module.hparams.net, nn.Module)
    said = [line for line in capsys.readouterr().out.splitlines() if "hparams" in line]
    assert len(said) == 1 and "net" in said[0] and "optimizer" in said[0], said


def test_a_foreign_pickled_checkpoint_is_refused_naming_the_object(tmp_path: Path) -> None:
    path = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"net": nn.Linear(2, 2)}}, path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint_file(path)
    line = str(caught.value)
    assert "\n" not in line and "torch.nn.modules.linear.Linear" in line
    assert "python -m trainwell.io.hparams" in line and "written by trainwell" not in line


def test_the_converter_named_in_the_refusal_makes_the_file_loadable(tmp_path: Path) -> None:
    source, target = tmp_path / "foreign.ckpt", tmp_path / "plain.ckpt"
    weights = {"w": torch.arange(4.0)}
    hparams = {"opt": functools.partial(torch.optim.SGD, lr=0.1), "widths": OmegaConf.create([3])}
    torch.save({"state_dict": weights, "hyper_parameters": hparams}, source)
    # What `python -m trainwell.io.hparams SOURCE TARGET` runs.
    assert hparams_main([str(source), str(target)]) == 0
    loaded = load_checkpoint_file(target)
    assert torch.equal(loaded["state_dict"]["w"], weights["w"])
    assert loaded["hyper_parameters"] == {
        "opt": "<partial torch.optim.sgd.SGD(lr=0.1)>",
        "widths": [3],
    }


def test_eval_of_a_foreign_pickled_checkpoint_is_one_line_naming_the_object(
    tmp_path: Path,
) -> None:
    path = tmp_path / "foreign.ckpt"
    partial = functools.partial(torch.optim.Adam, lr=1e-3)
    torch.save({"state_dict": {}, "hyper_parameters": {"optimizer": partial}}, path)
    proc = call_script("eval.py", f"ckpt_path={path}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "functools.partial" in errors[0], proc.stderr[-2000:]


def test_resume_auto_over_only_refused_checkpoints_says_so_and_never_starting_fresh(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save(
        {"state_dict": {}, "hyper_parameters": {"net": nn.Linear(2, 2)}},
        run_dir / "checkpoints" / "last.ckpt",
    )
    proc = call_script("train.py", "resume=auto", *QUICK, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert "torch.nn.modules.linear.Linear" in errors[0] and "last.ckpt" in errors[0]
    # Never "starting fresh", never advice to pass the resume=auto that was given.
    assert "starting fresh" not in proc.stdout + proc.stderr
    assert "with resume=auto" not in errors[0] and "continue it with" not in errors[0]
    assert not (run_dir / "results.json").exists()


def _train(run_dir: Path, *overrides: str):
    proc = run_script("train.py", *overrides, *QUICK, f"hydra.run.dir={run_dir}",
                      env=TESTS_IMPORTABLE)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _check_run(run_dir: Path, proc, tmp_path: Path) -> dict:
    """Results with test metrics; every .ckpt loads weights-only with full state; eval.py with
    nothing but ckpt_path gives the run's own test metrics."""
    results = json.loads((run_dir / "results.json").read_text())
    assert results["test"] == "best_ckpt"
    assert {"test/acc", "test/loss"} <= set(results["metrics"])
    checkpoints = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    assert {p.name for p in checkpoints} >= {"best.ckpt", "last.ckpt"}
    for path in checkpoints:
        saved = load_checkpoint(path)
        assert saved["optimizer_states"] and saved["loops"] and saved["state_dict"], path
    said = [line for line in proc.stdout.splitlines() if "hparams as plain data" in line]
    assert len(said) == 1, proc.stdout[-3000:]
    eval_dir = tmp_path / "eval"
    evaluated = run_script("eval.py", f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}",
                           f"hydra.run.dir={eval_dir}", env=TESTS_IMPORTABLE)  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    tested = json.loads((eval_dir / "results.json").read_text())["metrics"]
    assert tested["test/loss"] == results["metrics"]["test/loss"]
    return load_checkpoint(run_dir / "checkpoints" / "last.ckpt")["hyper_parameters"]


@pytest.mark.slow
def test_hydra_template_module_trains_tests_and_evaluates(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    hparams = _check_run(run_dir, _train(run_dir, *HYDRA_TEMPLATE), tmp_path)
    # The objects became the run's config nodes.
    assert hparams["net"]["_target_"] == "project.models.digits_cnn.DigitsCNN"
    assert hparams["optimizer"] == {
        "_target_": "torch.optim.AdamW", "_partial_": True, "lr": 0.003, "weight_decay": 0.01,
    }  # fmt: skip
    assert hparams["scheduler"]["_target_"] == "trainwell.blocks.schedules.warmup_cosine"


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        (*HYDRA_TEMPLATE, "model._target_=tests.helpers.foreign_modules.IgnoreNetModule"),
        WIDTHS,
    ],
    ids=["ignore-net", "listconfig-dictconfig"],
)
def test_other_public_module_shapes_train_test_and_evaluate(
    tmp_path: Path, overrides: tuple[str, ...]
) -> None:
    run_dir = tmp_path / "run"
    hparams = _check_run(run_dir, _train(run_dir, *overrides), tmp_path)
    if "hidden" in hparams:
        assert hparams["hidden"] == [32, 16] and hparams["optim"] == {"lr": 0.1, "momentum": 0.9}
    else:
        assert "net" not in hparams and hparams["optimizer"]["_target_"] == "torch.optim.AdamW"


@pytest.mark.slow
def test_hydra_template_module_killed_and_resumed_matches_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    steps = ("callbacks.step_checkpoint.every_n_train_steps=5", "callbacks.early_stopping=null")
    reference = tmp_path / "uninterrupted"
    _train(reference, *HYDRA_TEMPLATE, *steps)
    run_dir = tmp_path / "killed"
    killer = (
        "+callbacks.killer._target_=tests.helpers.killer.KillAt",
        "+callbacks.killer.batch=27",  # epoch 2 of 2, after step-checkpoint 5 of epoch 1
    )
    killed = run_script("train.py", *HYDRA_TEMPLATE, *steps, *killer, *QUICK,
                        f"hydra.run.dir={run_dir}", env=TESTS_IMPORTABLE)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run_dir / "results.json").exists()
    resumed = _train(run_dir, *HYDRA_TEMPLATE, *steps, "resume=auto")
    assert "resume=auto: resuming from" in resumed.stdout
    assert_bitwise_equal(final_state(run_dir), final_state(reference))
    # Validation and test metrics are recomputed in full after the resume. The module's train/*
    # epoch means are plain tensors logged with on_epoch=True, whose running sums Lightning keeps
    # outside the checkpoint: resumed mid-epoch they cover the resumed batches only (not a
    # hparams matter; torchmetrics metrics are restored, see callbacks/training_state.py).
    got, want = metrics(run_dir), metrics(reference)
    assert {k: v for k, v in got.items() if not k.startswith("train/")} == {
        k: v for k, v in want.items() if not k.startswith("train/")
    }
    assert got.keys() == want.keys()
