"""ExactEMA and its average (compat.PlacedAverage) on real short fits: built where the module
lives, one fused update per optimizer step with nothing read from a device, BatchNorm statistics
averaged (the batch counter copied), exact swaps for validation, and checkpoints that keep the
trained weights after fit and test the average (where compat/averaging.py says Lightning's
callback does otherwise; test_compat.py shows Lightning's own behaviour)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from tests.helpers.averaging import ConfiguredNormNet, NormNet, fit, points, saved
from tests.helpers.trainers import quiet_trainer
from trainwell.callbacks import ExactEMA
from trainwell.compat.averaging import PlacedAverage

pytestmark = pytest.mark.engine


def test_the_average_has_the_placed_modules_dtype(tmp_path: Path) -> None:
    module = NormNet()
    checkpoint = saved(fit(module, ExactEMA(decay=0.5), precision="64-true"), tmp_path / "c.ckpt")
    assert checkpoint["state_dict"]["net.0.weight"].dtype == torch.float64


def test_a_module_built_in_configure_model_is_averaged_without_a_second_build(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    module = ConfiguredNormNet()
    checkpoint = saved(fit(module, ExactEMA(decay=0.5)), tmp_path / "c.ckpt")
    assert not [w for w in recwarn if "sharding" in str(w.message)]
    assert checkpoint["state_dict"].keys() == module.state_dict().keys()


def test_an_update_reads_nothing_from_a_device_and_is_one_fused_step() -> None:
    """On the meta device no value can be read: the update never waits for one. Profiled: one
    foreach lerp for every floating tensor, whatever their number (one kernel on a GPU; the CPU
    runs it tensor by tensor), no per-tensor arithmetic around it."""
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(6)), nn.BatchNorm1d(4)).to("meta")
    average = PlacedAverage(model)
    for _ in range(3):
        average.update(model, decay=0.9)
    assert average.count == 3

    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(6)), nn.BatchNorm1d(4))
    average = PlacedAverage(model)
    average.update(model, decay=0.9)  # the first one copies
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        average.update(model, decay=0.9)
    names = [e.name for e in prof.events()]
    assert names.count("aten::_foreach_lerp_") == 1
    assert not {"aten::mul", "aten::add", "aten::item"} & set(names), sorted(set(names))


def test_batchnorm_statistics_are_averaged_and_its_counter_copied() -> None:
    model = nn.BatchNorm1d(3)
    average = PlacedAverage(model)
    means = []
    for step in range(3):
        model.train()
        model(torch.randn(8, 3) + step)
        means.append(model.running_mean.clone())
        average.update(model, decay=0.5)
    averaged = average.module.running_mean
    expected = torch.lerp(torch.lerp(means[0], means[1], 0.5), means[2], 0.5)
    assert torch.allclose(averaged, expected, atol=1e-7)
    assert int(average.module.num_batches_tracked) == 3  # copied, not averaged
    copied = PlacedAverage(model, use_buffers=False)
    copied.update(model, decay=0.5)
    model(torch.randn(8, 3) - 5)
    copied.update(model, decay=0.5)
    assert torch.equal(copied.module.running_mean, model.running_mean)


def test_tied_weights_stay_one_tensor_in_the_average() -> None:
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    average = PlacedAverage(model)
    assert len(list(average.module.parameters())) == len(list(model.parameters())) == 1
    copy = average.module
    assert copy.get_submodule("0").weight is copy.get_submodule("1").weight


class Record(Callback):
    """The first layer's weights at every training and validation batch."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, torch.Tensor]] = []

    def on_train_batch_start(self, trainer, pl_module, *args) -> None:
        self.seen.append(("train", pl_module.net[0].weight.detach().clone()))

    def on_validation_batch_start(self, trainer, pl_module, *args) -> None:
        self.seen.append(("val", pl_module.net[0].weight.detach().clone()))


def _fit_validating(callbacks: list[Callback]) -> NormNet:
    module = NormNet()
    trainer = quiet_trainer(
        callbacks=callbacks, max_steps=8, limit_val_batches=1, val_check_interval=4
    )
    trainer.fit(module, train_dataloaders=points(), val_dataloaders=points())
    return module


def test_validation_sees_the_average_and_training_goes_on_from_the_weights() -> None:
    ema, record = ExactEMA(decay=0.5), Record()
    _fit_validating([ema, record])
    kinds = [kind for kind, _ in record.seen]
    assert kinds == ["train"] * 4 + ["val"] + ["train"] * 4 + ["val"]
    weights = [w for kind, w in record.seen if kind == "train"]  # after steps 0..7
    expected = weights[1]  # the first update (step 1) copies
    for w in [*weights[2:4], weights[4]]:  # steps 2, 3, 4
        expected = torch.lerp(expected, w, 0.5)
    assert torch.allclose(record.seen[4][1], expected, atol=1e-7)
    # Swapped in and out bit for bit: training is exactly the run without an average.
    plain = _fit_validating([Record()])
    assert ema.average is not None
    trained = ema.average.module.get_submodule("net.0").weight
    assert torch.equal(trained, plain.net[0].weight)


def test_a_checkpoint_after_fit_keeps_the_trained_weights(tmp_path: Path) -> None:
    module = NormNet()
    ema = ExactEMA(decay=0.5)
    trainer = fit(module, ema)
    during = {k: v.clone() for k, v in module.state_dict().items()}  # the average, after fit
    checkpoint = saved(trainer, tmp_path / "after.ckpt")
    for name, value in checkpoint["state_dict"].items():
        assert torch.equal(value, during[name]), name
    assert ema.average is not None
    trained = ema.average.module.state_dict()  # after fit: the trained weights
    for name, value in checkpoint["current_model_state"].items():
        assert torch.equal(value, trained[name]), name
    assert int(checkpoint["averaging_state"]["n_averaged"]) == 4


def test_testing_a_checkpoint_after_fit_tests_its_average(tmp_path: Path) -> None:
    module = NormNet()
    trainer = fit(module, ExactEMA(decay=0.5))
    written = saved(trainer, tmp_path / "after.ckpt")
    written["state_dict"] = {k: v + 1.0 for k, v in written["current_model_state"].items()}
    torch.save(written, tmp_path / "distinct.ckpt")
    trainer.test(module, dataloaders=points(), ckpt_path=tmp_path / "distinct.ckpt")
    assert torch.equal(module.net[0].weight.detach(), written["state_dict"]["net.0.weight"])
