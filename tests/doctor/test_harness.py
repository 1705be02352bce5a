"""The doctor's harness on its own: batches of any structure, real samples, the overfit verdict."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.doctor import FAST, run_ids
from trainwell.doctor.checks.overfit import trend
from trainwell.doctor.harness.batches import (
    ConcatError,
    concat,
    leaves,
    padding_positions,
    replay_loader,
    rows,
    size_of,
)
from trainwell.doctor.harness.samples import TrainSamples


@dataclasses.dataclass
class Pair:
    image: torch.Tensor
    label: torch.Tensor


def test_leaves_name_every_tensor_in_any_structure() -> None:
    batch = {
        "x": (torch.zeros(2, 3), [torch.ones(2)]),
        "meta": "ids",
        "pair": Pair(torch.zeros(2), torch.ones(2)),
    }
    assert [p for p, _ in leaves(batch)] == [
        "batch['x'][0]",
        "batch['x'][1][0]",
        "batch['pair'].image",
        "batch['pair'].label",
    ]
    assert size_of(batch) == 2 and size_of({"text": "no tensor"}) is None


def test_concat_joins_same_structures_and_refuses_ragged_ones() -> None:
    a = {"tokens": torch.zeros(2, 5), "label": torch.zeros(2)}
    b = {"tokens": torch.ones(3, 5), "label": torch.ones(3)}
    joined = concat([a, b])
    assert joined["tokens"].shape == (5, 5) and joined["label"].tolist() == [0, 0, 1, 1, 1]
    with pytest.raises(ConcatError, match="cannot be concatenated"):
        concat([{"tokens": torch.zeros(2, 5)}, {"tokens": torch.zeros(2, 7)}])  # padded per batch


def test_rows_pick_samples_from_every_part_of_a_batch_and_keep_the_rest() -> None:
    batch = {
        "x": (torch.arange(4).repeat(2, 1).T, [torch.arange(4) * 10]),
        "name": ["a", "b", "c", "d"],  # a collated list of strings: one per sample
        "pair": Pair(torch.arange(4), torch.tensor(7.0)),  # a 0-dim tensor: shared, kept
        "split": "train",
    }
    picked = rows(batch, [3, 1, 3])
    assert picked["x"][0].tolist() == [[3, 3], [1, 1], [3, 3]]
    assert picked["x"][1][0].tolist() == [30, 10, 30]
    assert picked["name"] == ["d", "b", "d"] and picked["split"] == "train"
    assert picked["pair"].image.tolist() == [3, 1, 3] and float(picked["pair"].label) == 7.0
    assert batch["name"] == ["a", "b", "c", "d"]  # the original is left as it was


def test_replay_loader_yields_fresh_copies_in_order() -> None:
    batches = [{"x": torch.zeros(2)}, {"x": torch.ones(2)}]
    seen = []
    for batch in replay_loader(batches, repeats=2):
        seen.append(batch["x"].tolist())
        batch["x"].add_(5)  # a training_step editing its batch in place
    assert seen == [[0, 0], [1, 1], [0, 0], [1, 1]]


def _random_collate(items: list[torch.Tensor]) -> torch.Tensor:
    batch = torch.stack(items)
    return batch * (torch.rand(batch.shape) > 0.5)  # random masking, as masked-LM collates do


def test_train_samples_follow_the_loaders_own_batches_and_spot_a_random_collate() -> None:
    data = [torch.full((3,), float(i)) for i in range(10)]
    order = torch.Generator().manual_seed(0)
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=order)
    samples = TrainSamples(loader)
    expected = list(torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist())
    assert [i for b in samples.index_batches() for i in b] == expected
    assert [len(b) for b in samples.index_batches()] == [4, 4, 2]
    first = samples.micro_batches(0, 1)[0]
    assert first[:, 0].tolist() == [float(i) for i in expected[:4]]
    assert samples.collate_is_deterministic(expected[:4])
    masked = TrainSamples(DataLoader(data, batch_size=4, collate_fn=_random_collate))
    assert not masked.collate_is_deterministic([1, 2, 3, 4])


def test_train_samples_replay_a_dict_of_loaders_as_lightning_combines_it() -> None:
    samples = TrainSamples(
        {"a": DataLoader(range(4), batch_size=2), "b": DataLoader(range(6), batch_size=2)}
    )
    assert not samples.indexable and "dict" in samples.why_not_indexable
    batches = samples.real_batches(5)
    assert len(batches) == 3 and set(batches[0]) == {"a", "b"}  # max_size_cycle: 3 batches


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([2.3] + [0.1] * 20, "pass"),
        ([2.3 - 0.01 * i for i in range(40)], "slow"),
        ([2.3, 2.31, 2.29, 2.3] * 10, "flat"),
        ([2.3 + 0.05 * i for i in range(40)], "rising"),
        ([2.3, 1.0, math.nan], "non-finite"),
    ],
)
def test_trend_tells_learning_slowly_from_not_learning(values: list[float], kind: str) -> None:
    assert trend(values, 0.1).kind == kind


def test_a_healthy_model_at_the_edge_of_stability_is_warned_not_failed(tmp_path: Path) -> None:
    # SGD at lr 5 held constant diverges on one batch; at 0.5 it memorises it.
    overrides = [*FAST, "model/optimizer=sgd", "model.optimizer.lr=5"]
    check = run_ids(tmp_path, overrides, ["overfit.one_batch"])["overfit.one_batch"]
    assert check.status == "warn", check.message
    assert check.evidence["retry_lr_x0.1"]["kind"] == "pass"


def test_a_warmup_schedule_does_not_slow_the_overfit_probe(tmp_path: Path) -> None:
    # warmup_cosine over the whole run: its first steps have an LR near 0. The probe holds the
    # base LR instead.
    overrides = [*FAST, "model.scheduler.warmup_fraction=0.5"]
    check = run_ids(tmp_path, overrides, ["overfit.one_batch"])["overfit.one_batch"]
    assert check.evidence["constant_lr"] == [0.003]
    assert check.status == "pass", check.message


def test_a_verdict_does_not_depend_on_an_evaluation_that_crashed_before_it(tmp_path: Path) -> None:
    # The test_step of this exhibit raises: that pass must not leave the shared probe task in
    # eval mode (or hooked) for the checks after it, whose verdict would then be the crash's.
    overrides = [
        *FAST,
        "model._target_=tests.doctor.museum.MSEOnClassIdsTask",
        "model.net._target_=tests.doctor.museum.ClassIdRegressor",
    ]
    after = run_ids(tmp_path, overrides, ["eval.determinism", "checkpoint.roundtrip"])
    assert after["eval.determinism"].status == "fail"  # the crash is reported where it happens
    assert "raised" in after["eval.determinism"].message
    assert after["checkpoint.roundtrip"].status == "pass", after["checkpoint.roundtrip"].message


def test_padding_is_told_by_a_mask_lengths_or_a_pad_id_but_not_by_an_end_of_sequence_id() -> None:
    ids = torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 5], [3, 0, 0, 0, 0]])
    padded = ids == 0
    label = torch.tensor([0, 1, 0])
    masked = padding_positions({"input_ids": ids, "attention_mask": (~padded).long()})
    assert masked is not None and masked.marker == "batch['attention_mask']"
    assert torch.equal(masked.pad, padded) and masked.pad_id is None
    with_lengths = padding_positions((ids, torch.tensor([3, 5, 1]), label))
    assert with_lengths is not None and with_lengths.marker == "batch[1]"
    assert torch.equal(with_lengths.pad, padded)
    by_id = padding_positions((ids, label))
    assert by_id is not None and (by_id.marker, by_id.pad_id) == ("batch[0]", 0)
    assert torch.equal(by_id.pad, padded)
    labels = torch.where(padded, -100, ids)  # ignored labels at the padding only
    by_label = padding_positions({"x": torch.randn(3, 5), "labels": labels})
    assert by_label is not None and by_label.pad_id == -100
    # an id that ends some rows once (end of sequence), one also found inside a row, rows all
    # padded alike (fixed length): nothing tells padding from real positions
    for batch_rows in (
        [[5, 6, 7, 2], [1, 3, 4, 2], [3, 4, 1, 6]],
        [[5, 0, 7, 0, 0], [1, 2, 3, 4, 5], [3, 0, 0, 0, 0]],
        [[5, 6, 0, 0], [1, 2, 0, 0]],
    ):
        found = padding_positions((torch.tensor(batch_rows), label[: len(batch_rows)]))
        assert found is None, batch_rows


def test_evaluation_coverage_counts_a_dict_datasets_keys_as_they_are() -> None:
    """A map-style dataset keyed by names, read by a batch sampler of its keys: counted, not
    refused (a key that is no integer is still a sample drawn once)."""
    from torch.utils.data import DataLoader

    from trainwell.doctor.checks.coverage import _finding

    names = {f"img{i}": torch.tensor([float(i)]) for i in range(10)}

    class Named(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(names)

        def __getitem__(self, key: str) -> torch.Tensor:
            return names[key]

    keys = sorted(names)
    whole = DataLoader(Named(), batch_sampler=[keys[:6], keys[6:]])
    assert _finding(whole) is None
    twice = DataLoader(Named(), batch_sampler=[keys[:6], keys[4:]])
    found = _finding(twice)
    assert found is not None and "a second time" in found[0]
    by_tensor = DataLoader(Named(), batch_sampler=[[torch.tensor(1), torch.tensor(1)]])
    assert _finding(by_tensor) is not None  # the same index as two tensors: drawn twice
