"""The doctor against bugs that break an invariant of training in forms no check was written
for (tests/doctor/invariants/): each case is a plain Lightning module or datamodule beside its
fixed twin. The bug must draw the named status from the invariant's check; the twin must pass it,
and (slow suite) draw no `fail` from any check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict

from tests.helpers.config import compose_config
from tests.helpers.doctor import QUICK_PROBES, run_cfg
from trainwell.doctor.checks.modes import _metric_drift
from trainwell.doctor.harness.outputs import _call_ids
from trainwell.doctor.harness.spy import LossCall
from trainwell.doctor.report.verdict import Check

CASES_PKG = "tests.doctor.invariants"
ACC = "accumulation.equivalence"
COMMON = "tests.doctor.reported._common"

# (case module, which part is swapped: "model" | "data" | "tokens" (the model, on token
# sequences in dict batches) | "lengths" (the model, on (ids, lengths, label) tuples) | "ids"
# (the model, on dict batches of padded ids without a mask) | "fixed" (the same, padded to one
# width) | "stream" (the model, on the case's own `Stream` datamodule) | "own" (the model, on the
# case's own `Data`) | "records" (the data, read by the case's own `Model`), check
# id, status the bug draws)
CASES = [
    ("frozen_max_norm", "model", "optimizer.coverage", "fail"),
    ("frozen_batchnorm_stats", "model", "optimizer.coverage", "warn"),
    ("frozen_midrun_momentum", "model", "optimizer.coverage", "fail"),
    ("metric_in_plain_dict", "model", "eval.determinism", "fail"),
    ("loss_list_never_cleared", "model", "eval.determinism", "fail"),
    ("noisy_test_step", "model", "eval.determinism", "fail"),
    ("accuracy_shared_by_train_and_val", "model", "metrics.recomputation", "fail"),
    ("outputs_list_shared_by_steps", "model", "metrics.recomputation", "fail"),
    ("val_accuracy_never_reset", "model", "metrics.recomputation", "fail"),
    ("val_split_of_augmented_dataset", "data", "eval.determinism", "fail"),
    ("val_given_train_transform", "data", "eval.determinism", "fail"),
    ("cutout_in_shared_dataset", "data", "eval.determinism", "fail"),
    ("val_loaders_copy_drop_last", "data", "eval.coverage", "fail"),
    ("val_drawn_by_class_weights", "data", "eval.coverage", "fail"),
    ("val_last_batch_padded", "data", "eval.coverage", "fail"),
    ("stream_reseeded_each_epoch", "data", "data.epoch_order", "warn"),
    ("stream_exhausted_after_one_epoch", "data", "data.epoch_order", "fail"),
    ("batches_shuffled_once", "data", "data.epoch_order", "warn"),
    ("class_weights_handed_to_the_sampler", "data", "data.epoch_order", "fail"),
    ("labels_handed_as_indices", "data", "data.epoch_order", "fail"),
    ("class_weights_drawn_by_hand", "data", "data.epoch_order", "fail"),
    ("warmup_counter_attribute", "model", "checkpoint.roundtrip", "fail"),
    ("loss_average_attribute", "model", "checkpoint.roundtrip", "fail"),
    ("private_noise_generator", "model", "checkpoint.roundtrip", "fail"),
    ("custom_backward_wrong", "model", "grad.flow", "warn"),
    ("penalty_on_data", "model", "grad.flow", "warn"),
    ("detached_log_normaliser", "model", "grad.flow", "warn"),
    ("mean_over_padding", "tokens", "loss.padding", "fail"),
    ("attention_without_padding_mask", "tokens", "loss.padding", "fail"),
    ("tags_loss_counts_padding", "tokens", "loss.padding", "fail"),
    ("rnn_last_step_over_padding", "lengths", "loss.padding", "fail"),
    ("pad_ids_averaged_in", "ids", "loss.padding", "fail"),
    ("fixed_width_tags_count_padding", "fixed", "loss.padding", "fail"),
    ("decay_sized_for_one_epoch", "model", "schedule.interval", "fail"),
    ("cosine_epochs_stepped_per_step", "model", "schedule.interval", "fail"),
    ("warmup_from_batch_idx", "model", "schedule.interval", "warn"),
    ("plateau_on_an_unlogged_metric", "model", "schedule.interval", "fail"),
    ("scheduler_stepped_twice", "model", "schedule.interval", "fail"),
    ("warmup_stepped_in_a_hook_too", "model", "schedule.interval", "fail"),
    ("epoch_decay_stepped_in_epoch_end", "model", "schedule.interval", "fail"),
    ("val_labels_shuffled_apart", "data", "data.split_agreement", "fail"),
    ("label_map_per_split", "data", "data.split_agreement", "fail"),
    ("val_inputs_and_labels_zipped", "data", "data.split_agreement", "fail"),
    ("dict_val_labels_shuffled_apart", "records", "data.split_agreement", "fail"),
    ("val_tags_one_position_off", "records", "data.split_agreement", "fail"),
    ("loss_weighted_by_position", "model", "eval.batch_independence", "fail"),
    ("inputs_standardised_per_batch", "model", "eval.batch_independence", "warn"),
    ("sorted_by_length_labels_left", "tokens", "eval.batch_independence", "fail"),
    ("loss_smoothed_over_a_stream", "stream", "eval.batch_independence", "fail"),
    ("manual_head_steps_every_micro_batch", "model", "accumulation.equivalence", "fail"),
    ("manual_loss_halved_without_accumulation", "model", "accumulation.equivalence", "warn"),
    ("manual_summed_loss_divided", "model", "accumulation.equivalence", "fail"),
    ("val_split_from_the_stream", "data", "data.leakage", "fail"),
    ("val_shifted_copies", "data", "data.leakage", "fail"),
    ("flipped_copies_before_the_split", "data", "data.leakage", "fail"),
    ("val_reencoded_copies", "data", "data.leakage", "fail"),
    ("val_shifted_down_filled", "data", "data.leakage", "fail"),
    ("long_tailed_stream", "data", "data.class_balance", "fail"),
    ("long_tailed_records", "records", "data.class_balance", "fail"),
    ("class_weights_in_the_loss", "own", "data.class_balance", "fail"),
    ("stream_copied_to_every_worker", "data", "data.worker_seeding", "fail"),
    ("val_left_unscaled", "data", "data.split_distribution", "fail"),
    ("feature_logged_in_train_only", "records", "data.split_distribution", "fail"),
    ("val_text_not_lowercased", "records", "data.split_distribution", "warn"),
    ("sorted_by_class_no_shuffle", "data", "data.batch_composition", "fail"),
    ("stream_read_class_by_class", "data", "data.batch_composition", "fail"),
    ("batches_drawn_per_class", "data", "data.batch_composition", "fail"),
]


def run_case(
    tmp_path: Path, case: str, part: str, variant: str, ids: list[str] | None
) -> dict[str, Check]:
    """The doctor on the digits experiment with the case's module or datamodule swapped in."""
    cfg = compose_config(QUICK_PROBES, tmp_path / variant / "run", config_name="doctor")
    target = f"{CASES_PKG}.{case}.{variant}"
    with open_dict(cfg):
        model = {"data": f"{COMMON}.Classifier", "records": f"{CASES_PKG}.{case}.Model"}
        cfg.model = OmegaConf.create({"_target_": model.get(part, target)})
        data = {
            "data": target,
            "tokens": f"{CASES_PKG}._tokens.Tokens",
            "lengths": f"{CASES_PKG}._tokens.Lengths",
            "ids": f"{CASES_PKG}._tokens.PaddedIds",
            "fixed": f"{CASES_PKG}._tokens.FixedWidth",
            "stream": f"{CASES_PKG}.{case}.Stream",
            "own": f"{CASES_PKG}.{case}.Data",
            "records": target,
        }
        cfg.data = OmegaConf.create({"_target_": data.get(part, f"{COMMON}.Digits")})
    return run_cfg(cfg, tmp_path / variant / "p", ids)


@pytest.mark.parametrize(("case", "part", "check_id", "status"), CASES, ids=[c[0] for c in CASES])
def test_broken_invariant_is_flagged_and_its_fix_passes(
    tmp_path: Path, case: str, part: str, check_id: str, status: str
) -> None:
    bug = run_case(tmp_path, case, part, "Buggy", [check_id])[check_id]
    assert bug.status == status, bug.message
    assert "\n" not in bug.message and len(bug.message) > 20
    twin = run_case(tmp_path, case, part, "Healthy", [check_id])[check_id]
    assert twin.status == "pass", twin.message


@pytest.mark.slow
@pytest.mark.parametrize(("case", "part"), [c[:2] for c in CASES], ids=[c[0] for c in CASES])
def test_fixed_twin_draws_no_fail_from_any_check(tmp_path: Path, case: str, part: str) -> None:
    twin = run_case(tmp_path, case, part, "Healthy", None)
    assert [f"{c.id}: {c.message}" for c in twin.values() if c.status == "fail"] == []


def test_logged_values_that_repeat_a_nan_or_track_a_running_best_do_not_count_as_drift() -> None:
    nan = float("nan")
    first = {"recall": nan, "acc_best": 0.5, "loss": 1.0}
    other = {"recall": nan, "acc_best": 0.7, "loss": 2.0}
    again = {"recall": nan, "acc_best": 0.7, "loss": 1.25}
    assert _metric_drift(first, other, again) == {"loss": (1.0, 1.25)}


def test_a_training_step_that_draws_random_numbers_is_not_failed_for_reading_the_order(
    tmp_path: Path,
) -> None:
    # Mixup re-pairs reordered samples by design: the loss moves, and that is no bug.
    check = run_case(
        tmp_path, "mixup_in_training_step", "model", "Healthy", ["eval.batch_independence"]
    )["eval.batch_independence"]
    assert check.status != "fail", check.message


def test_labels_per_position_are_scored_at_real_positions_only() -> None:
    # Two sequences of 3 positions, 2 classes: one label ignored (-100), one position padded.
    scores = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]])
    target = torch.tensor([[0, 1, -100], [1, 0, 1]])
    batch = {"ids": torch.ones(2, 3), "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}
    call = LossCall("cross_entropy", scores, target, ignore_index=-100)
    predicted, true = _call_ids(call, batch)
    assert predicted.tolist() == [0, 1, 1, 0] and true.tolist() == [0, 1, 1, 0]
    call = LossCall("cross_entropy", scores, target.abs().clamp(max=1), ignore_index=1)
    assert [t.tolist() for t in _call_ids(call, batch)] == [[0, 0], [0, 0]]
    # one class id per sample: read as it is, whatever the batch's mask
    call = LossCall("cross_entropy", scores[:, :, 0], torch.tensor([1, 0]))
    assert [t.tolist() for t in _call_ids(call, batch)] == [[0, 1], [1, 0]]


def test_a_token_mean_weighted_by_samples_is_named_as_such_not_as_a_scale(tmp_path: Path) -> None:
    """A masked mean over tokens, under accumulation weighed by samples: the window has one
    batch's gradient size but not its direction, and the message says what to declare."""
    check = run_case(tmp_path, "tags_loss_counts_padding", "tokens", "Healthy", [ACC])[ACC]
    assert check.status == "warn", check.message  # K=1 here: latent, probed with K=2
    assert "def loss_items(self, batch)" in check.message, check.message
    assert "scaled per micro-batch" not in check.message


def test_a_split_copied_from_train_is_named_as_identical_not_as_near_copies(
    tmp_path: Path,
) -> None:
    """Exact copies are counted by hashing every sample train yields (iterable datasets too);
    the near-copy comparison, bounded to the first images, is for what no hash can see."""
    check = run_case(tmp_path, "val_split_from_the_stream", "data", "Buggy", ["data.leakage"])
    got = check["data.leakage"]
    assert got.status == "fail" and "are identical to train samples" in got.message, got.message
    assert got.evidence["val_overlap"] == got.evidence["val_samples_hashed"] == 360


def test_a_tensor_made_in_setup_is_named_with_where_to_create_it(tmp_path: Path) -> None:
    """A checkpoint holding a tensor a task gets only in setup() does not load where predict.py
    and export.py build the task from the config alone: the report names the tensor and says to
    create it in __init__."""
    got = run_case(
        tmp_path,
        "class_weights_in_the_loss",
        "own",
        "CriterionBuiltInSetup",
        ["checkpoint.roundtrip"],
    )["checkpoint.roundtrip"]
    assert got.status == "fail", got.message
    assert 'Unexpected key(s) in state_dict: "criterion.weight"' in got.message, got.message
    assert "create it in __init__" in got.message and "\n" not in got.message


def test_class_weights_under_a_mean_reduction_are_named_as_the_accumulation_cause(
    tmp_path: Path,
) -> None:
    """F.cross_entropy(weight=...) divides each micro-batch by its own sum of weights: the window
    is not one batch's weighted mean, and the message names that, with the exact form."""
    got = run_case(tmp_path, "class_weights_in_the_loss", "own", "Healthy", [ACC])[ACC]
    assert got.status == "warn", got.message  # K=1 here: latent, probed with K=2
    assert "CrossEntropyLoss(weight=...)" in got.message and "reduction='none'" in got.message
