"""The curated mutants of `make mutants` (tests/mutation/run.py): each a small, realistic bug in
the code behind one of the template's guarantees, and the default-suite tests that must catch it.

`old` must occur exactly once in `path`, as written or as a formatter may rewrite it (other line
breaks and indents, a trailing comma): else the mutant is reported stale. Keep it to a line or two
whose meaning is stable (a condition, an operator, a flag), and let `name` say the behaviour it
breaks. When code changes, update the mutant, never delete it without deleting the guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids or files, default suite only
    why: str  # the guarantee it breaks


ACC = "src/trainwell/callbacks/accumulation.py"
ACC_T = "tests/callbacks/test_accumulation.py"
LAST = "src/trainwell/callbacks/last_checkpoint.py"
STEP = "src/trainwell/callbacks/step_checkpoint.py"
LAST_T = "tests/training/test_last_checkpoint_during_run.py"
STATE = "src/trainwell/callbacks/training_state.py"
RESUME_T = "tests/training/test_resume_inprocess.py"
DEPLOY_T = "tests/deploy/test_predict_export.py"
OWNED_DEPLOY_T = "tests/deploy/test_owned_shipping.py"  # the engine tests' own modules
CIFAR_DEPLOY_T = "src/project/tests/deploy/test_cifar10.py"
LM_DEPLOY_T = "src/project/tests/deploy/test_language_model.py"
RAW = "src/trainwell/deploy/raw.py"
SERVE = "src/trainwell/deploy/serve.py"
SERVE_T = "tests/deploy/test_serve.py"
SERVE_BAD_T = (
    f"{SERVE_T}::test_a_bad_request_is_one_json_4xx_line_and_the_next_good_one_is_answered"
)
SERVE_TERM_T = f"{SERVE_T}::test_sigterm_finishes_the_request_in_flight_and_leaves_no_process"
PRE = "src/trainwell/callbacks/preemption.py"
PRE_T = "tests/callbacks/test_preemption_inprocess.py"
NONFIN = "src/trainwell/callbacks/non_finite.py"
GUARD_T = "tests/callbacks/test_guards.py"
PLAN = "src/trainwell/training/plan.py"
PLAN_T = "tests/training/test_plan.py"
PLAN_FAST = (  # the arithmetic, not the subprocess run that prints the plan
    f"{PLAN_T}::test_plan_for_ten_thousand_samples_batch_32_accumulate_4",
    f"{PLAN_T}::test_plan_world_size_drop_last_and_max_steps",
    f"{PLAN_T}::test_plan_follows_limit_and_overfit_batches",
    f"{PLAN_T}::test_max_steps_beyond_what_the_epochs_allow_ends_with_the_epochs",
    f"{PLAN_T}::test_a_fractional_limit_rounds_down_like_lightning",
)
SAMP = "src/trainwell/loading/samplers.py"
SHARD_T = "tests/loading/test_sharding.py"
SEARCH = "src/hydra_plugins/trainwell_optuna_sweeper/_search.py"
SWEEP_T = (
    "tests/training/test_search.py::test_a_maximized_sweep_of_another_metric_picks_the_largest"
)
CV = "src/trainwell/training/cv/folds.py"
CV_T = "tests/training/test_cross_validation.py"
CV_FOLDS_T = f"{CV_T}::test_five_folds_hold_every_train_val_index_once_stratified_and_seeded"
CV_STATS_T = f"{CV_T}::test_each_folds_checkpoints_carry_statistics_of_its_training_part_only"
CV_LEAK_T = f"{CV_T}::test_statistics_fitted_beyond_the_folds_training_part_are_refused"
CV_OOF_T = (
    f"{CV_T}::test_oof_accuracy_is_the_size_weighted_mean_and_each_fold_matches_its_validation"
)
CV_RESUME_T = (
    f"{CV_T}::test_resume_reruns_no_finished_fold_and_continues_the_interrupted_one_exactly"
)
PRUNE_T = "tests/training/test_pruning.py"
PRUNE_STEP_T = f"{PRUNE_T}::test_a_trial_worse_than_the_median_at_a_step_is_pruned_there"
PRUNE_CV_T = f"{PRUNE_T}::test_a_cv_trial_is_pruned_after_the_fold_that_makes_it_hopeless"
PRUNE_EPOCH_T = (
    f"{PRUNE_T}::test_a_single_split_trial_is_pruned_after_the_validation_that_makes_it_hopeless"
)
PRUNE_SWEEP_T = f"{PRUNE_T}::test_the_sweeper_replays_the_reports_and_records_the_trial_as_pruned"
MUSEUM_T = "tests/doctor/test_museum.py::test_planted_bug_is_caught"
INV_T = "tests/doctor/test_invariants.py::test_broken_invariant_is_flagged_and_its_fix_passes"
WEIGHTED_T = "tests/loading/test_weighted_sampler.py"
BALANCE_T = "src/project/tests/tasks/test_class_balance.py"
CLASS_BALANCE = "src/trainwell/doctor/checks/predictions.py"
CLASS_BALANCE_T = "tests/doctor/test_class_balance.py"

SEARCH_T = "tests/training/test_search.py"
# Prove the tests run the mutated copy: one checked in the pytest process, one in a script that a
# test runs in a subprocess (tests extend PYTHONPATH, which the harness points at the copy).
SMOKES = [
    Mutant(
        "smoke: in-process",
        "src/trainwell/cli.py",
        'f"optimized_metric={name} is not a metric of this run (available: {available})"',
        'f"optimized_metric={name} is not a known metric (available: {available})"',
        (f"{SEARCH_T}::test_optimized_value_is_the_named_metric_or_a_one_line_error",),
        "none: the harness's own check",
    ),
    Mutant(
        "smoke: subprocess",
        "src/trainwell/cli.py",
        'f"hparams_search={name} is an Optuna search: start it with -m "',
        'f"hparams_search={name} is an Optuna search: start it with --multirun "',
        (f"{SEARCH_T}::test_a_search_without_multirun_is_refused_before_training",),
        "none: the harness's own check",
    ),
]

MUTANTS: list[Mutant] = [
    # -- exact accumulation ---------------------------------------------------------------------
    Mutant(
        "accumulation: every micro-batch weighs the same, whatever its item count",
        ACC,
        "ratio = count / self.reference",
        "ratio = 1.0",
        (f"{ACC_T}::test_uneven_micro_batches_in_one_window_weigh_each_sample_once",),
        "each item weighs once in its window",
    ),
    Mutant(
        "accumulation: the window counts micro-batches, not items",
        ACC,
        "self._window = self._window + count",
        "self._window = self._window + 1",
        (f"{ACC_T}::test_uneven_micro_batches_in_one_window_weigh_each_sample_once",),
        "the step is the mean over the window's items",
    ),
    Mutant(
        "accumulation: Lightning's 1/K left in the gradients",
        ACC,
        "numerator = world * compat.lightning_loss_divisor(trainer) * (self.reference or 1.0)",
        "numerator = world * (self.reference or 1.0)",
        (f"{ACC_T}::test_four_micro_batches_of_8_equal_one_batch_of_32",),
        "K micro-batches equal one batch of K x B",
    ),
    Mutant(
        "accumulation: no scaling on one process (short tail window divided by K)",
        ACC,
        "(compat.lightning_loss_divisor(trainer) > 1 or world > 1)",
        "(world > 1)",
        (f"{ACC_T}::test_short_uneven_tail_windows_over_two_epochs",),
        "a short tail window is the mean over its own items",
    ),
    Mutant(
        "accumulation: the window's item count is never reset",
        ACC,
        "total, self._window = self._window, 0",
        "total = self._window",
        (f"{ACC_T}::test_short_uneven_tail_windows_over_two_epochs",),
        "each step is normalised by its own window",
    ),
    Mutant(
        "accumulation: the padding copy of a rank out of data counts as real items",
        ACC,
        "            count: int | torch.Tensor = 0  # a zero-weight copy: it counts no items\n",
        "            count = count_items(pl_module, batch, batch_idx)\n",
        ("tests/training/test_ddp_padding.py",),
        "a zero-weight padding batch adds nothing to the step",
    ),
    Mutant(
        "accumulation: each rank takes its own item count for every rank's (no all-reduce)",
        ACC,
        "            torch.distributed.all_reduce(reduced, op=torch.distributed.ReduceOp.SUM)",
        "            reduced = reduced * world",
        ("tests/training/test_ddp_padding.py",),
        "W ranks whose windows hold different item counts step as 1 process on their samples",
    ),
    Mutant(
        "accumulation: a declared token count is ignored",
        ACC,
        "    if not callable(getattr(module, ITEMS_HOOK, None)):\n        return batch_size(batch)",
        "    if True:\n        return batch_size(batch)",
        (f"{ACC_T}::test_token_level_loss_is_exact_by_tokens_when_declared",),
        "token-level losses are exact by tokens when declared",
    ),
    # -- sharding and loader order --------------------------------------------------------------
    Mutant(
        "sharding: padding batches not marked as padding",
        SAMP,
        "                padding.add(m)",
        "                pass",
        (f"{SHARD_T}::test_train_batches_cover_every_sample_once_with_equal_counts",),
        "padding batches are known as zero-weight copies",
    ),
    Mutant(
        "sharding: every rank evaluates the same batches",
        SAMP,
        "share = order[self.rank :: self.world_size]",
        "share = order[:: self.world_size]",
        (f"{SHARD_T}::test_evaluation_split_has_no_duplicate_and_equal_batch_counts",),
        "evaluation sees every sample once",
    ),
    Mutant(
        "sharding: the shuffle ignores the epoch",
        SAMP,
        "manual_seed(self.seed + self.epoch)",
        "manual_seed(self.seed)",
        (f"{SHARD_T}::test_epoch_shuffle_is_a_function_of_seed_and_epoch",),
        "the order is a function of (seed, epoch)",
    ),
    Mutant(
        "resumable loader: the saved position is dropped",
        "src/trainwell/loading/resumable.py",
        "self._pending = dict(state_dict)",
        "self._pending = None",
        (f"{RESUME_T}::test_resume_from_a_step_checkpoint_is_bitwise_exact",),
        "mid-epoch resume continues at the saved batch",
    ),
    # -- training state in checkpoints ----------------------------------------------------------
    Mutant(
        "training state: RNG not restored on resume",
        STATE,
        "            restore_rng(self._pending_rng)\n",
        "            pass\n",
        (f"{RESUME_T}::test_resume_from_a_step_checkpoint_is_bitwise_exact",),
        "a resumed run draws the uninterrupted run's random numbers",
    ),
    Mutant(
        "resume mid-epoch: the resumed epoch's plateau step is skipped (Lightning's restart flag)",
        STATE,
        "            compat.end_fit_restart(trainer)",
        "            pass",
        (
            "tests/training/test_resume_plateau.py::"
            "test_a_resume_from_a_mid_epoch_checkpoint_ends_where_the_uninterrupted_run_does",
        ),
        "a plateau scheduler resumed mid-epoch ends where the uninterrupted run does",
    ),
    Mutant(
        "training state: metric states not restored on resume",
        STATE,
        "                compat.restore_metric_states(present[name], saved)",
        "                pass",
        (f"{RESUME_T}::test_resume_from_a_step_checkpoint_is_bitwise_exact",),
        "epoch means and best-so-far metrics survive a resume",
    ),
    Mutant(
        "training state: restored logged metrics dropped",
        STATE,
        'self.restored_callback_metrics = dict(state_dict.get("callback_metrics", {}))',
        "self.restored_callback_metrics = {}",
        ("tests/training/test_resume_logged_metrics.py",),
        "a run resumed after its last step still reports the fit metrics",
    ),
    Mutant(
        "training state: logged metrics not saved",
        STATE,
        '"callback_metrics": logged,',
        '"callback_metrics": {},',
        ("tests/training/test_resume_logged_metrics.py",),
        "a run resumed after its last step still reports the fit metrics",
    ),
    Mutant(
        "exact accumulation: reference not restored on resume",
        ACC,
        'self.reference = state_dict.get("reference")',
        "self.reference = None",
        (f"{RESUME_T}::test_resume_from_a_step_checkpoint_is_bitwise_exact[7]",),
        "a resumed run rounds its gradients as the uninterrupted one",
    ),
    # -- last / best / step checkpoints ---------------------------------------------------------
    Mutant(
        "last.ckpt: no end-of-fit write",
        LAST,
        "        if trainer.global_step == compat.last_saved_step(self):\n            return",
        "        return",
        (f"{LAST_T}::test_last_ckpt_is_written_after_a_resume_from_finished_training",),
        "last.ckpt is the final state after a resume from finished training",
    ),
    Mutant(
        "last.ckpt: saved only when the monitored metric improves (last = best)",
        LAST,
        "            monitor=None,\n            save_top_k=1,",
        '            monitor="val/acc",\n            mode="max",\n            save_top_k=1,',
        (f"{LAST_T}::test_last_ckpt_is_the_newest_epoch_at_every_epoch_while_training",),
        "last.ckpt is always the newest end-of-epoch state",
    ),
    Mutant(
        "last checkpoint: saved only after validation (epochs without one leave it stale)",
        LAST,
        "            save_on_train_epoch_end=True,",
        "            save_on_train_epoch_end=None,",
        ("tests/callbacks/test_last_checkpoint_cadence.py",),
        "last.ckpt is the newest epoch however often validation runs",
    ),
    Mutant(
        "monitored metric: a metric the module never logs is not checked",
        "src/trainwell/training/builders.py",
        "        MonitoredMetricCheck(),\n",
        "",
        ("tests/training/test_unmonitored_modules.py",),
        "a module without the monitored metric trains or is refused in one line",
    ),
    Mutant(
        "monitored metric: a scheduler's unlogged metric is not refused",
        "src/trainwell/training/monitored_metric.py",
        "            raise TrainwellError(scheduler_monitor_line(module, unlogged, logged))",
        "            pass",
        (
            "tests/training/test_unmonitored_modules.py::"
            "test_a_scheduler_monitoring_an_unlogged_metric_stops_after_the_sanity_check",
        ),
        "a ReduceLROnPlateau on a metric validation does not log stops in one line, exit 2",
    ),
    Mutant(
        "doctor schedule.interval: a scheduler monitoring an unlogged metric passes",
        "src/trainwell/doctor/checks/schedule.py",
        "        if watch and unlogged:",
        "        if False:",
        (
            "tests/doctor/test_invariants.py::"
            "test_broken_invariant_is_flagged_and_its_fix_passes[plateau_on_an_unlogged_metric]",
        ),
        "the doctor says what the run stops on: a scheduler's metric validation does not log",
    ),
    Mutant(
        "monitored metric: a scheduler's metric waits past the sanity check",
        "src/trainwell/training/monitored_metric.py",
        "for n in [*names, *unlogged])",
        "for n in names)",
        (
            "tests/training/test_unmonitored_modules.py::"
            "test_a_scheduler_monitoring_an_unlogged_metric_stops_after_the_sanity_check",
        ),
        "a scheduler's unlogged metric is refused before any training step",
    ),
    Mutant(
        "step checkpoint: written at an epoch's last batch (resumes past validation)",
        STEP,
        "        if not (compat.at_epoch_last_batch(trainer) or compat.validation_follows(trainer)):",
        "        if True:",
        (f"{RESUME_T}::test_no_step_checkpoint_at_an_epochs_last_batch",),
        "a resume never skips an epoch's validation",
    ),
    # -- checkpoint IO --------------------------------------------------------------------------
    Mutant(
        "checkpoint loads: weights_only off",
        "src/trainwell/io/checkpoint_read.py",
        "weights_only=True, mmap=mmap)",
        "weights_only=False, mmap=mmap)",
        ("tests/training/test_security.py::test_loaders_refuse_the_pickle_and_nothing_runs",),
        "loading a checkpoint never runs pickled code",
    ),
    Mutant(
        "checkpoint writes: straight into the target, no temp file",
        "src/trainwell/io/checkpoint_write.py",
        'tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")',
        "tmp = target",
        ("tests/io/test_checkpoint_io.py",),
        "a checkpoint file is the old one or the new one, never half of one",
    ),
    Mutant(
        "background writes: the end-of-training flush is a no-op",
        "src/trainwell/io/background_writes.py",
        "    if callable(flush):\n        flush()",
        "    pass",
        ("tests/io/test_checkpoint_flushed_at_train_end.py",),
        "checkpoints are on disk when the training loop returns",
    ),
    Mutant(
        "background writes: never switched off after training",
        "src/trainwell/io/background_writes.py",
        "    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:\n"
        "        _set_background(trainer, False)",
        "    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:\n"
        "        pass",
        ("tests/io/test_checkpoint_io.py::test_background_during_the_training_loop_only",),
        "saves outside the training loop are synchronous",
    ),
    # -- pre-emption ----------------------------------------------------------------------------
    Mutant(
        "pre-emption: stops mid accumulation window",
        "src/trainwell/callbacks/cadence.py",
        "        batches_done % trainer.accumulate_grad_batches == 0\n",
        "        True\n",
        (f"{PRE_T}::test_a_signal_mid_window_stops_at_the_windows_end",),
        "the pre-emption checkpoint is taken at the end of a window",
    ),
    Mutant(
        "pre-emption: the signal handler records nothing",
        PRE,
        "        self.received = signum",
        "        self.received = None",
        (f"{PRE_T}::test_a_signal_in_an_epochs_last_window_stops_after_its_validation",),
        "SIGTERM/SIGUSR1 end the run with a checkpoint and exit 3",
    ),
    Mutant(
        "pre-emption: checkpoint at the epoch's last batch, before its validation",
        PRE,
        "        if compat.at_epoch_last_batch(trainer):",
        "        if False:",
        (f"{PRE_T}::test_a_signal_in_an_epochs_last_window_stops_after_its_validation",),
        "a pre-emption never resumes past an epoch's validation",
    ),
    # -- guards ---------------------------------------------------------------------------------
    Mutant(
        "non-finite guard: a NaN loss goes unnoticed on the CPU path",
        NONFIN,
        "                if not _finite_value(loss):",
        "                if False:",
        (f"{GUARD_T}::test_nan_loss_is_named_as_such_when_gradients_are_not_checked",),
        "a NaN loss stops the run naming the batch",
    ),
    Mutant(
        "non-finite guard: the device flag keeps the last bad batch, not the first",
        NONFIN,
        "self._flags[slot].clamp_(max=torch.where(ok, _NONE, code))",
        "self._flags[slot].copy_(torch.where(ok, self._flags[slot], code))",
        (f"{GUARD_T}::test_device_flags_name_the_first_bad_batch_and_stop_at_the_next_check",),
        "the error names the first bad batch",
    ),
    Mutant(
        "non-finite guard: non-finite gradients pass",
        NONFIN,
        "if not _all_finite(grads):",
        "if False:",
        (f"{GUARD_T}::test_non_finite_gradient_stops_the_run_naming_the_tensor",),
        "a non-finite gradient stops the run naming the tensor",
    ),
    Mutant(
        "non-finite guard: a NaN loss at a step's last batch is reported as a bad gradient",
        NONFIN,
        "if loss is not None and not _finite_value(loss):",
        "if False:",
        (f"{GUARD_T}::test_nan_batch_stops_the_run_naming_the_batch",),
        "a NaN loss is named as the cause, not its gradients",
    ),
    Mutant(
        "non-finite guard: flags not read before a checkpoint is written",
        NONFIN,
        "checkpoint: dict[str, Any]\n    ) -> None:\n        self.raise_if_seen(trainer)",
        "checkpoint: dict[str, Any]\n    ) -> None:\n        pass",
        (f"{GUARD_T}::test_device_flags_are_read_before_a_checkpoint_is_written",),
        "a NaN model is never checkpointed",
    ),
    Mutant(
        "train-mode guard: listing one module lets every module off",
        "src/trainwell/callbacks/train_mode.py",
        "if not m.training and not (name and name.startswith(self.allow_eval))",
        "if not m.training and not self.allow_eval",
        (f"{GUARD_T}::test_train_mode_guard_allows_listed_modules",),
        "a module left in eval stops the run",
    ),
    Mutant(
        "train-mode guard: listed modules refused too",
        "src/trainwell/callbacks/train_mode.py",
        "self.allow_eval = tuple(allow_eval)",
        "self.allow_eval = ()",
        (f"{GUARD_T}::test_train_mode_guard_allows_listed_modules",),
        "a deliberately frozen module is allowed",
    ),
    # -- the plan and LR scaling ----------------------------------------------------------------
    Mutant(
        "plan: max_steps beyond what the epochs allow is believed",
        PLAN,
        'return (max_steps if by_epochs is None else min(max_steps, by_epochs)), ""',
        'return max_steps, ""',
        (f"{PLAN_T}::test_max_steps_beyond_what_the_epochs_allow_ends_with_the_epochs",),
        "total steps = what the Trainer will really run",
    ),
    Mutant(
        "plan: the tail window is not a step",
        PLAN,
        "steps_per_epoch = math.ceil(iterations / accumulate)",
        "steps_per_epoch = iterations // accumulate",
        PLAN_FAST,
        "optimizer steps per epoch count the tail window",
    ),
    Mutant(
        "plan: ranks' rounds rounded down",
        PLAN,
        "rounds = math.ceil(global_batches / world_size)",
        "rounds = global_batches // world_size",
        PLAN_FAST,
        "iterations per rank include the last, padded round",
    ),
    Mutant(
        "plan: drop_last ignored",
        PLAN,
        "([rest] if rest and not drop_last else [])",
        "([rest] if rest else [])",
        PLAN_FAST,
        "drop_last removes the short batch from the plan",
    ),
    Mutant(
        "plan: effective batch without the world size",
        PLAN,
        '"effective_batch": micro_batch * accumulate * world_size if micro_batch else None,',
        '"effective_batch": micro_batch * accumulate if micro_batch else None,',
        PLAN_FAST,
        "effective batch = micro-batch x K x world size",
    ),
    Mutant(
        "plan: fractional limit_train_batches rounded up",
        PLAN,
        "return int(iterations * limit)",
        "return math.ceil(iterations * limit)",
        (f"{PLAN_T}::test_a_fractional_limit_rounds_down_like_lightning",),
        "the plan follows Lightning's limit_train_batches",
    ),
    Mutant(
        "lr scaling: sqrt rule scales linearly",
        "src/trainwell/training/lr_scaling.py",
        '"sqrt": math.sqrt}',
        '"sqrt": lambda ratio: ratio}',
        (f"{PLAN_T}::test_lr_scaling_rules",),
        "lr_scaling.rule=sqrt",
    ),
    Mutant(
        "lr scaling: ratio inverted",
        "src/trainwell/training/lr_scaling.py",
        "FACTORS[rule](effective_batch / reference_batch)",
        "FACTORS[rule](reference_batch / effective_batch)",
        (f"{PLAN_T}::test_lr_scaling_rules",),
        "lr_scaling.rule=linear",
    ),
    # -- the Optuna sweeper ---------------------------------------------------------------------
    Mutant(
        "sweeper: direction hard-coded to minimize",
        SEARCH,
        "            sampler=self._sampler(0),\n            direction=self.direction,",
        '            sampler=self._sampler(0),\n            direction="minimize",',
        (SWEEP_T,),
        "hydra.sweeper.direction=maximize picks the largest value",
    ),
    Mutant(
        "sweeper: optimized metric hard-coded to val/loss",
        "src/trainwell/cli.py",
        'name = cfg.get("optimized_metric")',
        'name = "val/loss" if cfg.get("optimized_metric") else None',
        (SWEEP_T,),
        "optimized_metric=<name> is what the sweep optimizes",
    ),
    # -- doctor checks --------------------------------------------------------------------------
    Mutant(
        "doctor grad.zeroing: leaked gradients pass",
        "src/trainwell/doctor/checks/gradients.py",
        "    if leaked:",
        "    if False:",
        (f"{MUSEUM_T}[optimizer_zero_grad does nothing]",),
        "grad.zeroing fails gradients leaking across steps",
    ),
    Mutant(
        "doctor checkpoint.roundtrip: tolerance too loose",
        "src/trainwell/doctor/checks/checkpoint.py",
        "    if diff > 1e-6:",
        "    if diff > 1e6:",
        (f"{MUSEUM_T}[eval-only state outside the checkpoint]",),
        "checkpoint.roundtrip fails state left out of the checkpoint",
    ),
    Mutant(
        "doctor eval.determinism: only differing outputs count, not train-mode modules",
        "src/trainwell/doctor/checks/modes.py",
        "    if max_diff > 1e-6 or in_train:",
        "    if max_diff > 1e6:",
        (f"{MUSEUM_T}[BatchNorm put in train mode in validation]",),
        "eval.determinism fails validation in train mode",
    ),
    Mutant(
        "resume from last.ckpt: the next epoch's iterator keeps epoch 0",
        "src/trainwell/compat/loops.py",
        "    resumed = fit_loop.restarting or epoch > 0",
        "    resumed = fit_loop.restarting",
        (
            "tests/test_compat.py::"
            "test_an_epoch_end_resume_builds_the_next_epochs_iterator_before_its_epoch_is_set",
        ),
        "a run resumed from an end-of-epoch checkpoint draws and augments the next epoch exactly",
    ),
    # Imbalanced classes: the weighted draw, the macro metrics, class weights, the doctor.
    Mutant(
        "weighted sampler: the draw uses the global RNG, not (seed, epoch)",
        SAMP,
        "draw = torch.multinomial(self.weights, self.num_samples, True, generator=generator)",
        "draw = torch.multinomial(self.weights, self.num_samples, True)",
        (
            f"{WEIGHTED_T}::test_the_draw_is_a_function_of_seed_and_epoch",
            f"{WEIGHTED_T}::test_ranks_take_disjoint_shares_of_the_one_process_draw",
        ),
        "a weighted epoch is one draw, a function of (seed, epoch): W ranks = 1 process",
    ),
    Mutant(
        "weighted sampler: drawn without replacement",
        SAMP,
        "draw = torch.multinomial(self.weights, self.num_samples, True, generator=generator)",
        "draw = torch.multinomial(self.weights, self.num_samples, False, generator=generator)",
        (f"{WEIGHTED_T}::test_batches_hold_the_classes_in_equal_shares_within_a_stated_tolerance",),
        "the weighted draw is with replacement, sized by samples_per_epoch",
    ),
    Mutant(
        "weighted sampler: samples_per_epoch ignored",
        SAMP,
        "self.num_samples = int(num_samples) if num_samples else weights.numel()",
        "self.num_samples = weights.numel()",
        (f"{WEIGHTED_T}::test_samples_per_epoch_sets_the_epoch_length",),
        "data.samples_per_epoch sets the epoch length",
    ),
    Mutant(
        "weighted sampler: uniform weights instead of inverse class frequency",
        "src/trainwell/loading/sharding.py",
        "weights = 1.0 / class_counts(labels).double()[labels]",
        "weights = torch.ones(len(labels), dtype=torch.float64)",
        (
            f"{WEIGHTED_T}::test_batches_hold_the_classes_in_equal_shares_within_a_stated_tolerance",
            f"{WEIGHTED_T}::test_trainwell_datamodules_take_data_sampler_weighted",
        ),
        "data.sampler=weighted draws every class equally often on average",
    ),
    Mutant(
        "weighted sampler: a resume replays the consumed batches",
        "src/trainwell/loading/resumable.py",
        "            start_at(skip)\n            replay = 0",
        "            start_at(0)",
        (f"{WEIGHTED_T}::test_a_mid_epoch_resume_continues_bitwise_and_loads_only_what_is_left",),
        "a mid-epoch resume with the weighted sampler loads no consumed sample",
    ),
    Mutant(
        "training mean: the scalar shortcut drops the item count",
        "src/trainwell/blocks/metrics.py",
        "            self.mean_value.add_(value * count)",
        "            self.mean_value.add_(value)",
        (
            "tests/blocks/test_metrics.py::test_weighted_mean_equals_torchmetrics_mean_metric_bitwise",
        ),
        "the training loss is the item-weighted mean of the micro-batch losses",
    ),
    Mutant(
        "training mean: the loss it reads keeps its autograd graph",
        "src/trainwell/blocks/metrics.py",
        "        value = value.detach()",
        "        value = value",
        (
            "tests/blocks/test_metrics.py::"
            "test_training_metrics_never_join_the_graph_of_what_they_read",
        ),
        "a training metric's states never join the autograd graph of what they read",
    ),
    Mutant(
        "balanced accuracy: precision averaged instead of recall",
        "src/trainwell/blocks/metrics.py",
        "    return counts.diagonal() / counts.sum(dim=1)",
        "    return counts.diagonal() / counts.sum(dim=0)",
        (f"{BALANCE_T}::test_metrics_of_a_hand_computed_confusion_matrix",),
        "balanced accuracy is the macro recall",
    ),
    Mutant(
        "macro F1: false negatives left out",
        "src/trainwell/blocks/metrics.py",
        "    denominator = 2 * tp + false_pos + false_neg",
        "    denominator = 2 * tp + false_pos",
        (f"{BALANCE_T}::test_metrics_of_a_hand_computed_confusion_matrix",),
        "macro F1 is the mean of 2TP / (2TP + FP + FN)",
    ),
    Mutant(
        "macro metrics counted on the training path",
        "src/project/tasks/classification.py",
        "        self.train_acc.update(preds, y)\n",
        "        self.train_acc.update(preds, y)\n        self.val_macro_f1.update(preds, y)\n",
        (f"{BALANCE_T}::test_val_and_test_log_the_macro_metrics_and_training_does_not_count",),
        "balanced accuracy / macro F1 add no work to the training step",
    ),
    Mutant(
        "class weights: never computed from the training split",
        "src/project/tasks/classification.py",
        "            self.class_weights.copy_(balanced_class_weights(counts))",
        "            pass",
        (
            f"{BALANCE_T}::"
            "test_balanced_class_weights_come_from_the_training_split_and_live_in_the_checkpoint",
        ),
        "model.loss.class_weights=balanced is n / (C x n_c) on the training split, checkpointed",
    ),
    Mutant(
        "class weights: normalised by the batch's weight sum",
        "src/project/tasks/classification.py",
        "        return (per_sample * self.class_weights[y]).mean()",
        "        return (per_sample * self.class_weights[y]).sum() / self.class_weights[y].sum()",
        (f"{BALANCE_T}::test_the_weighted_loss_is_a_mean_over_samples_of_weighted_losses",),
        "the class-weighted loss is a mean over samples (exact accumulation holds)",
    ),
    Mutant(
        "recall 0 never reported",
        "src/trainwell/training/class_recall.py",
        "not math.isnan(value) and value == 0.0",
        "not math.isnan(value) and value < 0.0",
        (
            f"{BALANCE_T}::test_a_class_with_recall_0_is_named_in_one_line",
            "tests/training/test_imbalanced.py::"
            "test_a_run_that_never_recognises_a_class_says_so_in_one_line",
        ),
        "a tested checkpoint with a class at recall 0 says so in one line",
    ),
    Mutant(
        "doctor data.class_balance: imbalance never noticed",
        CLASS_BALANCE,
        "    if ratio < IMBALANCE_RATIO:",
        "    if ratio < 1e9:",
        (
            f"{CLASS_BALANCE_T}::test_uncompensated_imbalance_warns",
            f"{CLASS_BALANCE_T}::test_collapsed_predictions_fail",
        ),
        "data.class_balance warns on uncompensated imbalance and fails collapsed predictions",
    ),
    Mutant(
        "doctor data.class_balance: collapse never judged",
        CLASS_BALANCE,
        "    return int((predicted > 0).sum()) == 1 and",
        "    return int((predicted > 0).sum()) == 0 and",
        (f"{CLASS_BALANCE_T}::test_collapsed_predictions_fail",),
        "data.class_balance fails predictions collapsed onto the majority class",
    ),
    Mutant(
        "doctor data.class_balance: compensation ignored",
        CLASS_BALANCE,
        "    if compensation:",
        "    if False:",
        (f"{CLASS_BALANCE_T}::test_compensated_imbalance_passes",),
        "a weighted sampler, class weights or a macro monitor silence the warning",
    ),
    Mutant(
        "data.class_balance: the loader's own sampler read from the config, not its draws",
        CLASS_BALANCE,
        "        if drawn < IMBALANCE_RATIO:",
        "        if getattr(ctx.datamodule, 'sampler', None) == 'weighted':",
        (f"{CLASS_BALANCE_T}::test_the_loaders_own_weighted_sampler_compensates",),
        "class-balance advice reads what the run's own sampler draws",
    ),
    Mutant(
        "data.class_balance: the loss's class weights read from the config, not its gradient",
        CLASS_BALANCE,
        "    if weighed is not None and weighed < IMBALANCE_RATIO:",
        "    if str((ctx.cfg.model.get('loss') or {}).get('class_weights')) == 'balanced':",
        (f"{INV_T}[class_weights_in_the_loss]",),
        "class-balance advice reads the class weights the loss really applies",
    ),
    Mutant(
        "one-line errors: a first line ending in ':' is not followed by its cause",
        "src/trainwell/errors.py",
        '    return f"{first} {cause}" if first.endswith(":") and cause else first',
        "    return first",
        ("tests/test_errors.py::test_a_first_line_that_announces_its_cause_is_followed_by_it",),
        "a one-line report names the keys a state_dict load rejects, not only its wrapper line",
    ),
    Mutant(
        "doctor accumulation.equivalence: class weights under a mean reduction go unnamed",
        "src/trainwell/doctor/checks/accumulation.py",
        '    if not multiplied and any(c.weighted and c.reduction == "mean" for b in calls for c in b):',
        "    if False:",
        (
            "tests/doctor/test_invariants.py::"
            "test_class_weights_under_a_mean_reduction_are_named_as_the_accumulation_cause",
        ),
        "a weighted mean per micro-batch is named as the reason windows differ",
    ),
    Mutant(
        "checkpoint rehearsal: a probe's run datamodule state is left out",
        "src/trainwell/callbacks/checkpoint_rehearsal.py",
        "    if datamodule is not None and trainer.datamodule is not datamodule:",
        "    if datamodule is not None and trainer.datamodule is None:",
        (
            "tests/training/test_state_at_step_zero.py::"
            "test_the_doctor_judges_the_datamodules_state_as_the_run_does",
        ),
        "the doctor's checkpoint check holds the run's datamodule state, as the run's does",
    ),
    Mutant(
        "doctor probe fits: the task's trainer has no datamodule",
        "src/trainwell/doctor/harness/context.py",
        "trainer.fit(task, datamodule=data, ckpt_path",
        "trainer.fit(task, train, val, ckpt_path",
        (f"{INV_T}[class_weights_in_the_loss]",),
        "a task whose setup reads self.trainer.datamodule is probed as it runs",
    ),
    Mutant(
        "doctor eval.coverage: a dropped last batch goes uncounted",
        "src/trainwell/doctor/checks/coverage.py",
        "    if declared is not None and len(first) < declared:",
        "    if declared is not None and len(first) < declared - 64:",
        (f"{INV_T}[val_loaders_copy_drop_last]",),
        "every evaluated split is scored on each of its samples exactly once",
    ),
    Mutant(
        "doctor eval.coverage: samples scored twice go uncounted",
        "src/trainwell/doctor/checks/coverage.py",
        "    twice = sum(n - 1 for n in counts.values())",
        "    twice = 0",
        (f"{INV_T}[val_drawn_by_class_weights]", f"{INV_T}[val_last_batch_padded]"),
        "every evaluated split is scored on each of its samples exactly once",
    ),
    Mutant(
        "doctor eval.determinism: an evaluation item that reads differently each time passes",
        "src/trainwell/doctor/checks/modes.py",
        "            if diffs and max(diffs) > 0:",
        "            if diffs and max(diffs) > 1e9:",
        (
            f"{INV_T}[val_split_of_augmented_dataset]",
            f"{INV_T}[val_given_train_transform]",
            f"{INV_T}[cutout_in_shared_dataset]",
        ),
        "evaluation is a function of the weights: an item read twice is the same tensor",
    ),
    Mutant(
        "doctor schedule.interval: a scheduler stepped twice passes on a flat stretch",
        "src/trainwell/doctor/checks/schedule.py",
        "    ahead = [count - want for count, want in zip(counts, planned, strict=True)]",
        "    ahead = [0 for count, want in zip(counts, planned, strict=True)]",
        (
            f"{INV_T}[scheduler_stepped_twice]",
            f"{INV_T}[epoch_decay_stepped_in_epoch_end]",
        ),
        "the learning rate each optimizer step uses is what the configured schedule alone gives",
    ),
    Mutant(
        "doctor data.epoch_order: a sampler that reaches a handful of samples passes",
        "src/trainwell/doctor/checks/order.py",
        "    if reach < REACH * min(len(first), size):",
        "    if reach < 0:",
        (
            f"{INV_T}[class_weights_handed_to_the_sampler]",
            f"{INV_T}[labels_handed_as_indices]",
            f"{INV_T}[class_weights_drawn_by_hand]",
        ),
        "over an epoch the training sampler draws the distinct samples a pass over the data does",
    ),
    Mutant(
        "doctor data.leakage: images moved by a pixel are not compared as near copies",
        "src/trainwell/doctor/harness/near_copies.py",
        "        for dy, dx in product(KEPT, KEPT):",
        "        for dy, dx in [(0, 0)]:",
        (f"{INV_T}[val_shifted_copies]",),
        "no evaluation sample is a near copy of a training sample",
    ),
    Mutant(
        "doctor data.leakage: the edge a one-pixel shift frees is compared too",
        "src/trainwell/doctor/harness/near_copies.py",
        "KEPT = {-1: slice(None, -1), 0: slice(None), 1: slice(1, None)}",
        "KEPT = {-1: slice(None), 0: slice(None), 1: slice(None)}",
        (f"{INV_T}[val_shifted_down_filled]",),
        "no evaluation sample is a near copy of a training sample",
    ),
    Mutant(
        "doctor: a monitored metric validation never logs, refused by train.py, passes the doctor",
        "src/trainwell/doctor/run.py",
        "            refuse_unlogged_monitor(cfg, fit.trainer, logged)",
        "            pass",
        (
            "tests/doctor/test_config.py::"
            "test_the_doctor_refuses_a_monitored_metric_validation_never_logs_as_train_does",
        ),
        "a message that never contradicts the command given: the doctor refuses what train.py does",
    ),
    Mutant(
        "training plan: the template's weighted draw is planned as each sample once per epoch",
        "src/trainwell/loading/samplers.py",
        "    replacement = True  # as torch's samplers say it (the training plan reads it)",
        "    replacement = False",
        (f"{PLAN_T}::test_the_plan_says_when_an_epoch_draws_with_replacement",),
        "the printed training plan states what an epoch draws",
    ),
    Mutant(
        "results.json: a test that never ran is said to have used the trained weights",
        "src/trainwell/callbacks/ema.py",
        "    if not tested:",
        "    if False:",
        (
            "tests/training/test_ema.py::test_a_run_without_ema_says_its_weights_are_the_trained_ones",
        ),
        "results.json says which weights its metrics come from, and only for metrics it has",
    ),
    Mutant(
        "doctor data.leakage: mirrored images are not compared as near copies",
        "src/trainwell/doctor/harness/near_copies.py",
        "    for flipped in (queries, queries.flip(-1)):",
        "    for flipped in (queries,):",
        (f"{INV_T}[flipped_copies_before_the_split]",),
        "no evaluation sample is a near copy of a training sample",
    ),
    Mutant(
        "doctor metrics.recomputation: a logged accuracy is compared with the whole fit's outputs",
        "src/trainwell/doctor/harness/logged.py",
        "        self.val_batches = {}",
        "        pass  # every pass's batches kept",
        (f"{INV_T}[val_accuracy_never_reset]",),
        "a logged validation metric equals its recomputation from that pass's outputs",
    ),
    Mutant(
        "doctor metrics: the shared fit validates once, so no pass follows another",
        "src/trainwell/doctor/harness/logged.py",
        "val_every=max(1, len(train) // 2) if val else None,",
        "val_every=len(train) if val else None,",
        (f"{INV_T}[val_accuracy_never_reset]",),
        "a logged validation metric equals its recomputation from that pass's outputs",
    ),
    Mutant(
        "doctor metrics.recomputation: a logged accuracy that differs passes",
        "src/trainwell/doctor/checks/recomputation.py",
        "        if min(abs(value - r) for r in recomputed) > TOLERANCE:",
        "        if min(abs(value - r) for r in recomputed) > 0.05:",
        (f"{INV_T}[accuracy_shared_by_train_and_val]", f"{INV_T}[outputs_list_shared_by_steps]"),
        "a logged validation metric equals its recomputation from that pass's outputs",
    ),
    Mutant(
        "doctor checkpoint.roundtrip: scheduler states missing from the checkpoint pass",
        "src/trainwell/doctor/checks/checkpoint.py",
        '    if evidence["lr_schedulers"] < evidence["schedulers"]:',
        "    if False:",
        (
            "tests/doctor/test_museum.py::"
            "test_planted_bug_is_caught[scheduler state emptied from the checkpoint]",
        ),
        "a checkpoint that would restart the schedule on resume fails",
    ),
    Mutant(
        "doctor accumulation.equivalence: a window of one batch's size is called scaled",
        "src/trainwell/doctor/checks/accumulation.py",
        "    if not multiplied and abs(ratio - 1) < 0.02:",
        "    if False:",
        (
            "tests/doctor/test_invariants.py::"
            "test_a_token_mean_weighted_by_samples_is_named_as_such_not_as_a_scale",
        ),
        "the message names what the user can change, never a scale that is not there",
    ),
    Mutant(
        "doctor data.class_balance: samples that are no (input, label) pairs go uncounted",
        CLASS_BALANCE,
        "            labels, kept = _streamed(ctx, why)",
        "            raise TrainwellError(why)",
        (f"{INV_T}[long_tailed_records]",),
        "the classes of dict records and (x, y, index) triples are counted from their batches",
    ),
    Mutant(
        "doctor batches: per-sample names and ids are not joined when batches are",
        "src/trainwell/doctor/harness/batches.py",
        "    if all(_per_sample_list(b, n) for b, n in zip(batches, sizes, strict=True)):",
        "    if False:",
        (f"{INV_T}[long_tailed_records]",),
        "records with string ids are regrouped into one batch (class collapse, windows)",
    ),
    Mutant(
        "doctor targets: a target the training step reordered is not found in the batch",
        "src/trainwell/doctor/harness/observe.py",
        "    tests = (torch.equal, lambda a, b:",
        "    tests = (torch.equal,) or (lambda a, b:",
        (f"{CLASS_BALANCE_T}::test_labels_a_training_step_reorders_are_still_counted",),
        "labels sorted with their sequences are still read as the loss's targets",
    ),
    Mutant(
        "doctor data.class_balance: any collapse fails, untrained nets included",
        CLASS_BALANCE,
        " and int(predicted.argmax()) == int(counts.argmax())",
        "",
        (f"{CLASS_BALANCE_T}::test_an_untrained_net_collapsed_onto_another_class_is_no_fail",),
        "legitimate code is never failed: only collapse onto the majority class fails",
    ),
    Mutant(
        "step checkpoint: written right before a mid-epoch validation (resumes past it)",
        STEP,
        "        if not (compat.at_epoch_last_batch(trainer) or compat.validation_follows(trainer)):",
        "        if not compat.at_epoch_last_batch(trainer):",
        (
            "tests/training/test_resume_before_validation.py::test_every_written_checkpoint_resumes_with_the_validations_it_owes[template-half-epoch]",
        ),
        "a resume never skips a validation the run owes",
    ),
    Mutant(
        "resume: a user's per-step ModelCheckpoint writes right before validations",
        STATE,
        "            _hold_user_step_saves(trainer)",
        "            pass",
        (
            "tests/training/test_resume_before_validation.py::test_every_written_checkpoint_resumes_with_the_validations_it_owes[user-epoch-end]",
        ),
        "a user's own step checkpoints resume exactly too",
    ),
    Mutant(
        "resume: metrics logged before the checkpoint are gone until logged again",
        STATE,
        "            if key not in live:",
        "            if False:",
        (
            "tests/training/test_resume_before_validation.py::test_every_written_checkpoint_resumes_with_the_validations_it_owes[user-every-3-batches]",
        ),
        "a plateau scheduler reads, after a resume, what it would have read uninterrupted",
    ),
    Mutant(
        "pre-emption: checkpoint right before a mid-epoch validation",
        PRE,
        "        if compat.validation_follows(trainer):",
        "        if False:",
        (f"{PRE_T}::test_a_signal_in_the_window_before_a_mid_epoch_validation_stops_after_it",),
        "a pre-emption never resumes past a validation",
    ),
    Mutant(
        "resume: a checkpoint of the renamed callbacks loses their states",
        "src/trainwell/io/checkpoint_write.py",
        "        return with_current_callback_names(",
        "        return (",
        (
            "tests/training/test_resume_renamed_callbacks.py::"
            "test_a_checkpoint_with_the_old_callback_names_resumes_bitwise",
        ),
        "older checkpoints of the template resume exactly",
    ),
    Mutant(
        "checkpoint reads: a sharded FSDP directory is not read",
        "src/trainwell/io/checkpoint_read.py",
        "    if is_sharded_checkpoint(path):\n        return _load_sharded(path, map_location)\n",
        "",
        ("tests/io/test_sharded_checkpoint_read.py",),
        "resume=auto and ckpt_path continue from sharded checkpoints",
    ),
    Mutant(
        "resume: a restartable stream restarts its epoch from the first sample",
        "src/trainwell/compat/loops.py",
        "        if callable(resume_at):",
        "        if False:",
        (
            "tests/training/test_resume_iterable.py::"
            "test_a_restartable_stream_resumes_mid_epoch_exactly",
        ),
        "an iterable dataset that can restart resumes mid-epoch exactly",
    ),
    Mutant(
        "doctor memory.graph_leak: a graph chained across steps by a kept total is not seen",
        "src/trainwell/doctor/checks/gradients.py",
        "    if _grows(nodes, 1):",
        "    if _grows(nodes, 1000):",
        (f"{MUSEUM_T}[running loss total kept as a tensor]",),
        "memory.graph_leak fails a running loss total kept as a tensor",
    ),
    Mutant(
        "doctor schedule.interval: a step-sized scheduler stepped per epoch passes",
        "src/trainwell/doctor/checks/schedule.py",
        '        pace = "optimizer step"\n    elif length == ctx.plan.max_epochs or',
        '        pace = "epoch"\n    elif length == ctx.plan.max_epochs or',
        (f"{MUSEUM_T}[step-sized OneCycleLR returned bare (per epoch)]",),
        "schedule.interval warns on a scheduler sized in steps but stepped per epoch",
    ),
    Mutant(
        "doctor optimizer.coverage: a module-level requires_grad attribute is not looked at",
        "src/trainwell/doctor/checks/structure.py",
        '        if module.__dict__.get("requires_grad") is False',
        '        if module.__dict__.get("requires_grad") is True',
        (f"{MUSEUM_T}[module.requires_grad attribute instead of requires_grad_()]",),
        "optimizer.coverage fails a freeze written as a module attribute",
    ),
    Mutant(
        "serve request validation: values outside the manifest's range pass",
        "src/trainwell/deploy/input_spec.py",
        "            if low < self.range[0] or high > self.range[1]:",
        "            if low < self.range[0]:",
        ("tests/deploy/test_request.py",),
        "a /predict value outside the manifest's input range is a one-line 4xx, not a prediction",
    ),
    Mutant(
        "serve request validation: NaN reaches the model",
        "src/trainwell/deploy/input_spec.py",
        "        if floats and not np.isfinite(samples).all():",
        "        if False:",
        ("tests/deploy/test_request.py",),
        "a /predict body with NaN is a one-line 4xx, not a prediction",
    ),
    Mutant(
        "serve request validation: a fractional value is truncated into a uint8 input",
        "src/trainwell/deploy/input_spec.py",
        '        if dtype.kind in "ui" and floats:',
        "        if False:",
        ("tests/deploy/test_request.py",),
        "a uint8 model's request with 3.5 in it is a one-line 4xx, not a silently truncated image",
    ),
    Mutant(
        "serve request validation: the level-by-level check takes booleans for numbers",
        "src/trainwell/deploy/request.py",
        "        if kinds <= {int, float}:",
        "        if kinds <= {int, float, bool}:",
        ("tests/deploy/test_request.py",),
        "a /predict body with true/false in it is a one-line 4xx on the fast path too",
    ),
    Mutant(
        "serve request validation: the level-by-level check passes lists nested too deep",
        "src/trainwell/deploy/request.py",
        "    return None  # lists nested deeper than `depth`",
        "    return {float}  # lists nested deeper than `depth`",
        ("tests/deploy/test_request.py",),
        "a /predict body nested deeper than the input's shape is a one-line 4xx naming it",
    ),
    Mutant(
        "serve request validation: a .npy header's declared size is not checked before loading",
        "src/trainwell/deploy/request.py",
        "    if max_bytes is not None and declared > max_bytes:",
        "    if False:",
        ("tests/deploy/test_request.py",),
        "a .npy body declaring an array past the size limit is a 413 before any allocation",
    ),
    Mutant(
        "serve request validation: a body of another kind goes to the reader its header names",
        "src/trainwell/deploy/request.py",
        "    if not found or found == expected:",
        "    if True:",
        ("tests/deploy/test_request.py",),
        "an .npz or JSON body sent as .npy is a 400 naming both kinds, not numpy's pickle advice",
    ),
    # -- serve (deploy/serve.py) ------------------------------------------------------------------
    Mutant(
        "serve batching: a request that found the worker idle waits on another queue round trip",
        "src/trainwell/deploy/batching.py",
        "        if time.monotonic() - first[2] < FRESH:  # the worker was idle: run it at once",
        "        if False:",
        ("tests/deploy/test_batching.py",),
        "at concurrency 1 batching on answers as fast as batching off (no extra queue round trip)",
    ),
    Mutant(
        "serve batching: a lone request waits out the batch window",
        "src/trainwell/deploy/batching.py",
        "        if len(payloads) > 1:  # others were queued: a burst may still be arriving",
        "        if payloads:",
        ("tests/deploy/test_batching.py",),
        "at concurrency 1 batching on answers as fast as batching off (no window wait alone)",
    ),
    Mutant(
        "serve: the export's files are read without checking their sha256",
        "src/trainwell/deploy/artifact.py",
        "    manifest = verify_export(export_dir)",
        "    manifest = read_manifest(export_dir)",
        (f"{SERVE_T}::test_a_tampered_or_missing_file_exits_2_naming_it_before_any_server",),
        "a changed or missing export file: exit 2 naming it, no server",
    ),
    Mutant(
        "serve: the worker builds its session from bytes it did not check",
        SERVE,
        "        if hashlib.sha256(data).hexdigest() != self.onnx_sha256:",
        "        if False:",
        (f"{SERVE_T}::test_a_worker_refuses_an_onnx_file_changed_after_the_check",),
        "model.onnx changed between the main process's check and a worker's load is refused",
    ),
    Mutant(
        "serve: /predict bodies bypass the request checks",
        SERVE,
        '        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST":',
        "        if True:",
        (SERVE_BAD_T,),
        "a bad request is a one-line JSON 4xx and the next good one is answered, never a 500",
    ),
    Mutant(
        "serve: a batch of requests is split back by the first request's size",
        SERVE,
        "        return np.concatenate(inputs), [len(x) for x in inputs]",
        "        return np.concatenate(inputs), [len(inputs[0])] * len(inputs)",
        (
            f"{SERVE_T}::test_concurrent_requests_of_different_sizes_each_get_their_own_answers",
            f"{SERVE_T}::test_requests_batched_together_each_get_the_answers_for_their_own_samples",
        ),
        "under dynamic batching each request gets the answers for its own samples",
    ),
    Mutant(
        "serve: probabilities normalised over the whole batch, not per sample",
        SERVE,
        "    return z / z.sum(axis=-1, keepdims=True)",
        "    return z / z.sum()",
        (f"{SERVE_T}::test_health_and_a_batch_answered_as_onnxruntime_in_process",),
        "the server's probabilities equal softmax of ONNX Runtime's logits, sample by sample",
    ),
    Mutant(
        "serve: ort_spin=run leaves ONNX Runtime's threads spinning after each run",
        SERVE,
        'options.add_session_config_entry("session.force_spinning_stop", "1")',
        "pass",
        (f"{SERVE_T}::test_ort_spin_reaches_the_workers_session",),
        "ort_spin=run stops ONNX Runtime's spinning when a run ends",
    ),
    Mutant(
        "serve: SIGTERM keeps Python's default (main dies, workers keep serving)",
        "src/trainwell/deploy/shutdown.py",
        "    signal.signal(signal.SIGTERM, on_sigterm)",
        "    signal.signal(signal.SIGTERM, signal.SIG_DFL)",
        (SERVE_TERM_T,),
        "SIGTERM finishes the request in flight, exits 0 within 10 s, leaves no process",
    ),
    Mutant(
        "serve: forked children keep the main process's SIGTERM handler",
        "src/trainwell/deploy/shutdown.py",
        "    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))",
        "    pass",
        (SERVE_TERM_T,),
        "a SIGTERM stops every LitServe child cleanly: no KeyboardInterrupt traceback from the broker",
    ),
    Mutant(
        "serve: the drain timeout is left at LitServe's 30 s",
        "src/trainwell/compat/serving.py",
        "    server.uvicorn_graceful_timeout = float(seconds)",
        "    pass",
        ("tests/test_compat.py::test_litserve_drains_for_uvicorn_graceful_timeout_seconds",),
        "requests in flight get drain_timeout (8 s) after SIGTERM, inside Kubernetes' 10 s",
    ),
    Mutant(
        "serve: artifact=latest picks the oldest export",
        "src/trainwell/deploy/artifact.py",
        "    return manifests[-1].parent",
        "    return manifests[0].parent",
        (f"{SERVE_T}::test_latest_is_the_export_whose_manifest_was_written_last",),
        "make serve serves the export whose manifest.json was written last",
    ),
    Mutant(
        "serve: the server listens on every interface by default",
        "conf/serve.yaml",
        "host: 127.0.0.1",
        "host: 0.0.0.0",
        (f"{SERVE_T}::test_it_listens_on_localhost_only",),
        "the model is reachable from localhost only unless host= says otherwise",
    ),
    # -- predict and export (deploy/) -------------------------------------------------------------
    Mutant(
        "predict: rows in loader order, not index order",
        "src/trainwell/deploy/predict.py",
        'order = np.argsort(index, kind="stable")',
        "order = np.arange(len(index))",
        (f"{DEPLOY_T}::test_predictions_match_the_test_metric_once_each_in_index_order",),
        "predictions.csv lists every sample once, in index order",
    ),
    Mutant(
        "predict: a module's predict_step is ignored (forward is written)",
        "src/trainwell/deploy/predict.py",
        "                if step:  # predict_step is the prediction, as in Lightning",
        "                if False:",
        (
            "src/project/tests/deploy/test_diabetes.py::test_predictions_are_predict_step_in_target_units",
        ),
        "predict writes what predict_step returns (target units for the regression example)",
    ),
    Mutant(
        "export: the graph leaves out predict_step (forward only)",
        "src/trainwell/deploy/export.py",
        "    head = Prediction(run.module) if defines_predict_step(run.module) else run.module",
        "    head = run.module",
        (
            "src/project/tests/deploy/test_diabetes.py::test_the_export_computes_predict_step_and_says_so",
        ),
        "the exported graph computes predict_step after the preprocessing",
    ),
    Mutant(
        "predict: label scores argmaxed as class scores",
        "src/trainwell/deploy/predict.py",
        "    if kind.kind != CLASS_SCORES:",
        "    if False:",
        (
            "tests/deploy/test_label_scores.py::test_predictions_are_labels_and_per_label_probabilities",
        ),
        "no command argmaxes an output it was not told is class scores",
    ),
    Mutant(
        "serve: values answered as class scores",
        "src/trainwell/deploy/serve.py",
        "        if self.kind != CLASS_SCORES:",
        "        if False:",
        ("tests/deploy/test_label_scores.py::test_the_server_answers_per_label",),
        "the server answers the fields of the output's kind, the numbers predict writes",
    ),
    Mutant(
        "digits: statistics refitted even when the checkpoint carries them",
        "src/project/data/digits.py",
        "        if self.mean is None or self.std is None:\n            # Fitted",
        "        if True:\n            # Fitted",
        (f"{DEPLOY_T}::test_statistics_come_from_the_checkpoint_never_refitted",),
        "prediction and export read the train-split statistics from the checkpoint",
    ),
    Mutant(
        "deploy: a checkpoint without datamodule statistics is accepted",
        "src/trainwell/deploy/loading.py",
        "    if datamodule.state_dict():\n        key = type(datamodule).__qualname__",
        "    if False:\n        key = type(datamodule).__qualname__",
        (f"{DEPLOY_T}::test_a_checkpoint_without_statistics_gets_one_line",),
        "an old checkpoint gets one line, never silently refitted statistics",
    ),
    Mutant(
        "export: parity ignores the max output difference",
        "src/trainwell/deploy/parity.py",
        "        if agreement < 1.0 or beyond > tolerance:",
        "        if agreement < 1.0:",
        (
            f"{DEPLOY_T}::test_parity_is_enforced_on_agreement_and_max_difference",
            f"{DEPLOY_T}::test_values_in_large_units_may_differ_by_their_float32_rounding",
        ),
        "export exits 2 when the exported files do not reproduce eval",
    ),
    Mutant(
        "export: the graph skips the checkpoint's normalisation",
        "src/trainwell/blocks/preprocess.py",
        "x = (x.to(torch.float32) - self.mean) / self.std",
        "x = x.to(torch.float32)",
        (f"{DEPLOY_T}::test_the_export_reproduces_eval_with_only_onnxruntime_and_numpy",),
        "the exported graph takes raw samples: the preprocessing is inside it",
    ),
    Mutant(
        "export: the raw graph leaves out the datamodule's preprocessing",
        RAW,
        "        return self.model(self.preprocess(inputs))",
        "        return self.model(inputs)",
        (f"{OWNED_DEPLOY_T}::test_the_export_takes_raw_digits_and_answers_as_the_predictions",),
        "a datamodule's raw_form() preprocessing is inside the exported graph (any datamodule)",
    ),
    Mutant(
        "export: CIFAR-10's raw uint8 pixels are not scaled to [0, 1] in the graph",
        "src/trainwell/blocks/preprocess.py",
        "x = x.permute(0, 3, 1, 2).to(torch.float32).div(255)",
        "x = x.permute(0, 3, 1, 2).to(torch.float32)",
        (f"{CIFAR_DEPLOY_T}::test_the_raw_graph_equals_the_eval_transform_exactly",),
        "the exported graph maps raw uint8 HWC images to exactly what evaluation feeds the model",
    ),
    Mutant(
        "cifar10: the checkpoint's mean and std are ignored",
        "src/project/data/cifar10.py",
        '        if "mean" in state_dict and "std" in state_dict:',
        "        if False:",
        (f"{CIFAR_DEPLOY_T}::test_the_raw_graph_equals_the_eval_transform_exactly",),
        "prediction and export normalise with the statistics the checkpoint carries",
    ),
    Mutant(
        "cifar10: the normalisation does not travel in the checkpoint",
        "src/project/data/cifar10.py",
        '        return {"mean": list(self.mean), "std": list(self.std)}',
        "        return {}",
        (f"{CIFAR_DEPLOY_T}::test_the_normalisation_travels_in_the_checkpoint",),
        "whatever evaluation normalises with is saved in every checkpoint",
    ),
    Mutant(
        "predict: a grey or RGBA PNG is taken for an RGB image",
        "src/trainwell/deploy/raw_input.py",
        'if image.mode != "RGB" or image.size != (width, height) or channels != 3:',
        "if image.size != (width, height):",
        (f"{CIFAR_DEPLOY_T}::test_bad_raw_input_gets_one_line_and_exit_2",),
        "input= PNGs must be what the model was trained on; anything else is one line, exit 2",
    ),
    Mutant(
        "export: synthetic on-device images normalised with CIFAR-10's statistics",
        "src/project/data/synthetic.py",
        "preprocess: torch.nn.Module = ImageNormalize((QUANT_MEAN,) * 3, (QUANT_STD,) * 3)",
        "preprocess: torch.nn.Module = ImageNormalize((0.4914, 0.4822, 0.4465), (0.247, 0.2435, 0.2616))",
        (
            "src/project/tests/deploy/test_synthetic.py::test_the_raw_graph_input_is_what_evaluation_sees_bit_for_bit",
        ),
        "synthetic raw samples through the graph's preprocessing equal evaluation's input",
    ),
    Mutant(
        "predict: input= files reach the model without the input spec's check",
        "src/trainwell/deploy/predict.py",
        '    return raw.spec.check(read_raw_input(str(source), raw.spec), where=f"input={source}")',
        "    return read_raw_input(str(source), raw.spec)",
        (
            "tests/deploy/test_input_paths.py::test_the_server_and_predict_refuse_with_the_same_line",
        ),
        "input= samples the server would refuse are one line and exit 2, the server's line",
    ),
    Mutant(
        "deploy: a user datamodule's preprocess is left out of the graph",
        RAW,
        'preprocess=form.get("preprocess") or nn.Identity(),',
        "preprocess=nn.Identity(),",
        ("tests/deploy/test_raw_form.py::test_the_hook_gives_spec_splits_preprocess_and_classes",),
        "raw_form()'s preprocessing is part of what predict and export run",
    ),
    Mutant(
        "deploy: a datamodule without raw_form() is asked for it anyway",
        RAW,
        "    if callable(getattr(datamodule, HOOK, None)):\n        return from_hook(datamodule)",
        "    if True:\n        return from_hook(datamodule)",
        (
            "tests/deploy/test_raw_form.py::test_without_the_hook_a_split_is_its_batch_form_in_loader_order",
        ),
        "a datamodule without raw_form() is predicted and exported in the batch form its loaders yield",
    ),
    Mutant(
        "predict: a token model's next token read at the padding, not the last real position",
        "src/trainwell/deploy/predict.py",
        "pick = mask.sum(dim=1) - 1",
        "pick = mask.sum(dim=1) * 0 + mask.shape[1] - 1",
        (f"{LM_DEPLOY_T}::test_next_token_top_k_per_sequence_and_the_test_loss_from_the_file",),
        "each sequence's next-token top-k follows its last real token",
    ),
    Mutant(
        "predict: a token model's log-likelihood counts the padding",
        "src/trainwell/deploy/predict.py",
        "ll.append(torch.where(mask, taken, 0.0).sum(dim=1).numpy())",
        "ll.append(taken.sum(dim=1).numpy())",
        (f"{LM_DEPLOY_T}::test_next_token_top_k_per_sequence_and_the_test_loss_from_the_file",),
        "-sum(log_likelihood) / sum(tokens) from predictions.csv equals the run's test/loss",
    ),
    Mutant(
        "export: a token model's sequence length is fixed at the example's",
        "src/trainwell/deploy/export.py",
        '    for axis, name in spec["dynamic_axes"].items():',
        '    for axis, name in list(spec["dynamic_axes"].items())[:1]:',
        (
            f"{LM_DEPLOY_T}::test_the_export_takes_any_batch_and_sequence_length_through_onnxruntime",
        ),
        "the token model's ONNX graph takes any batch and any sequence length",
    ),
    Mutant(
        "sequences: the vocabulary is fitted again over the checkpoint's",
        "src/project/data/sequences.py",
        "            if self.vocabulary is None:",
        "            if True:",
        (
            "src/project/tests/data/test_sequences.py::"
            "test_the_vocabulary_travels_in_the_checkpoint_and_is_never_refitted",
        ),
        "the character vocabulary fitted on train travels in the checkpoint and is never refitted",
    ),
    Mutant(
        "config values: the range of a template key is not checked",
        "src/trainwell/config_values.py",
        "            or (low is not None and value < low)\n",
        "",
        (
            "tests/test_config_values.py::test_the_command_line_check_names_key_value_and_expectation",
        ),
        "trainer.accumulate_grad_batches=0 is one line naming the key, exit 2, before data loads",
    ),
    Mutant(
        "config values: only the lower end of a template key's range is checked",
        "src/trainwell/config_values.py",
        "            or (high is not None and value > high)\n",
        "",
        (
            "tests/test_config_values.py::test_the_command_line_check_names_key_value_and_expectation",
            "tests/test_config_values.py::test_serve_knobs_are_checked_at_both_ends",
        ),
        "ema.decay=1.5 is one line, exit 2, before the config prints",
    ),
    Mutant(
        "config values: a multirun's job does not check the template's values",
        "src/trainwell/cli.py",
        "            _refuse_template_value(cfg)\n",
        "",
        ("tests/test_config_values.py::test_a_multiruns_job_checks_the_table_before_it_prints",),
        "each job of a sweep refuses a bad template value in one line before it prints",
    ),
    Mutant(
        "config values: a _target_'s arguments are not checked against its annotations",
        "src/trainwell/config_values.py",
        "        if allowed is None or any(_is(value, kind) for kind in allowed):",
        "        if True:",
        (
            "tests/test_config_values.py::test_the_command_line_check_names_key_value_and_expectation",
        ),
        "a wrong type for a datamodule's or net's argument is one line naming the key, exit 2",
    ),
    Mutant(
        "config values: a knob outside its choices passes",
        "src/trainwell/config_values.py",
        "        if value is not _MISSING and value not in choices:",
        "        if False:",
        (
            "tests/test_config_values.py::test_a_serve_knob_outside_its_choices_is_one_line_before_any_import",
        ),
        "ort_spin=sometimes is one line naming the key and its choices, exit 2, before any import",
    ),
    Mutant(
        "not a checkpoint: any weights-only refusal read as pickled code",
        "src/trainwell/io/checkpoint_read.py",
        "        if _GLOBAL.search(str(err)):",
        '        if "weights only" in str(err).lower():',
        (
            "tests/io/test_not_a_checkpoint.py::"
            "test_the_loader_says_not_a_readable_checkpoint_and_what_it_found",
        ),
        "a file that is not a checkpoint is named so, not sent to the pickled-code converter",
    ),
    Mutant(
        "resumable loader: the saved position pickles the sampler object",
        "src/trainwell/loading/resumable.py",
        '"epoch_batches": len(self)}',
        '"epoch_batches": len(self), "sampler": self.batch_sampler}',
        (
            "tests/io/test_checkpoint_names_no_module.py::"
            "test_every_checkpoint_of_a_run_names_no_trainwell_module",
        ),
        "a checkpoint holds plain data: moving a module never orphans an old checkpoint",
    ),
    Mutant(
        "doctor data.epoch_order: a repeated shuffled order is taken for no shuffle",
        "src/trainwell/doctor/checks/order.py",
        "    shuffled = first != sorted(first)",
        "    shuffled = first == sorted(first)",
        (f"{MUSEUM_T}[sampler without set_epoch]",),
        "data.epoch_order warns a sampler that repeats one shuffled order every epoch",
    ),
    Mutant(
        "doctor precision.master_weights: float16 weights are not looked at",
        "src/trainwell/doctor/checks/structure.py",
        "        if p.dtype in (torch.float16, torch.bfloat16):",
        "        if p.dtype == torch.bfloat16:",
        (f"{MUSEUM_T}[weights cast to float16]",),
        "precision.master_weights fails float16 weights updated with no float32 copy",
    ),
    Mutant(
        "doctor checkpoint.partial_load: every given key counts as loaded",
        "src/trainwell/doctor/checks/checkpoint.py",
        "            matched = len(expected & set(given))",
        "            matched = len(given)",
        (f"{MUSEUM_T}[strict=False load that matches nothing]",),
        "checkpoint.partial_load fails a strict=False load that matches no key",
    ),
    Mutant(
        "doctor eval.batch_independence: the half batch's outputs are never compared",
        "src/trainwell/doctor/checks/batch_edits.py",
        "        rows = p.shape[0] // n * k",
        "        rows = p.shape[0] // n * n",
        ("tests/doctor/test_museum.py::test_batch_statistics_in_eval_show_in_the_outputs",),
        "eval.batch_independence warns eval outputs that depend on the rest of the batch",
    ),
    Mutant(
        "doctor eval.batch_independence: the loss is never recomputed in another sample order",
        "src/trainwell/doctor/checks/batch_edits.py",
        "        reversed_ = eval_loss(task, make(order[::-1]))",
        "        reversed_ = eval_loss(task, make(order))",
        (f"{INV_T}[loss_weighted_by_position]",),
        "eval.batch_independence fails a training loss that reads the batch order",
    ),
    Mutant(
        "doctor eval.batch_independence: an iterable dataset's batch is never taken apart",
        "src/trainwell/doctor/harness/batches.py",
        "        return x[torch.tensor(index)] if torch.is_tensor(x) else type(x)(x[i] for i in index)",
        "        return x",
        (
            "tests/doctor/test_harness.py::"
            "test_rows_pick_samples_from_every_part_of_a_batch_and_keep_the_rest",
            f"{INV_T}[loss_smoothed_over_a_stream]",
        ),
        "eval.batch_independence fails a loss that reads the batch order on an iterable dataset",
    ),
    Mutant(
        "doctor: an evaluation that raised leaves the shared probe task in eval mode",
        "src/trainwell/doctor/harness/outputs.py",
        "            module.training = training",
        "            pass",
        (
            "tests/doctor/test_harness.py::"
            "test_a_verdict_does_not_depend_on_an_evaluation_that_crashed_before_it",
        ),
        "a check's verdict does not depend on which checks ran before it",
    ),
    Mutant(
        "doctor eval.batch_independence: a step that draws random numbers is compared anyway",
        "src/trainwell/doctor/checks/batch_edits.py",
        "    if other_seed != whole:",
        "    if False:",
        (
            "tests/doctor/test_invariants.py::"
            "test_a_training_step_that_draws_random_numbers_is_not_failed_for_reading_the_order",
        ),
        "eval.batch_independence never fails mixup or noise in training_step for reading order",
    ),
    Mutant(
        "doctor eval.batch_independence: the doubled batch's loss is never compared",
        "src/trainwell/doctor/checks/batch_edits.py",
        "    doubled = min(abs(twice - whole), abs(twice - 2 * whole)) > tol",
        "    doubled = False",
        (f"{INV_T}[inputs_standardised_per_batch]",),
        "eval.batch_independence warns a training loss that depends on batch companions",
    ),
    Mutant(
        "doctor targets.contract: input and target that broadcast to (N, N) pass",
        "src/trainwell/doctor/checks/loss.py",
        "    if shape.numel() <= max(call.input.numel(), call.target.numel()):",
        "    if shape.numel() >= max(call.input.numel(), call.target.numel()):",
        (f"{MUSEUM_T}[MSE on (N, 1) against (N,)]",),
        "targets.contract fails an elementwise loss whose input and target broadcast",
    ),
    Mutant(
        "doctor schedule.interval: a schedule sized far past the run passes",
        "src/trainwell/doctor/checks/schedule.py",
        "    if length >= LONG * total:",
        "    if length >= LONG * total * 10**6:",
        (f"{MUSEUM_T}[OneCycleLR sized far past the run]",),
        "schedule.interval warns a step-sized schedule far longer than the run",
    ),
    Mutant(
        "doctor schedule.interval: a scheduler stepped before its optimizer passes",
        "src/trainwell/doctor/checks/schedule.py",
        "        if j == 0 and count > want:",
        "        if j == 0 and count > want + 1:",
        (f"{MUSEUM_T}[scheduler stepped before the optimizer]",),
        "schedule.interval warns scheduler.step() called before optimizer.step()",
    ),
    Mutant(
        "num_classes: the model's default ignores the datamodule",
        "src/trainwell/resolvers.py",
        "    return declared\n",
        "    return 10\n",
        (
            "tests/doctor/test_head_width.py::"
            "test_the_models_num_classes_defaults_from_the_datamodule",
        ),
        "num_classes is written once, in the datamodule; the model's default follows it",
    ),
    Mutant(
        "doctor model.head_width: a wider head passes",
        "src/trainwell/doctor/checks/loss.py",
        "    if head == declared:",
        "    if head >= declared:",
        (
            "tests/doctor/test_head_width.py::"
            "test_a_head_wider_than_the_declared_classes_is_warned_with_both_numbers",
        ),
        "a head whose width differs from the datamodule's declared classes gets a warning",
    ),
    Mutant(
        "notebook: the newest run is the last name",
        "notebooks/run_curves.ipynb",
        "run_dir = max(runs, key=lambda r: started[r])",
        "run_dir = sorted(runs)[-1]",
        (
            "tests/test_notebooks.py::"
            "test_the_newest_run_is_the_one_that_started_last_not_the_last_name",
        ),
        "the notebook plots the run that started last, whatever the runs are named",
    ),
    Mutant(
        "doctor report: the overfit check's time leaves out the probe fit it judges",
        "src/trainwell/doctor/checks/overfit.py",
        "    verdict.seconds = obs.seconds if ran_before else 0.0",
        "    verdict.seconds = 0.0",
        ("tests/doctor/test_report.py::test_default_experiment_is_clean_and_fully_reported",),
        "the doctor's report times are real: the overfit check counts the fit it ran",
    ),
    Mutant(
        "noise: Lightning's logger advert printed by every run",
        "src/trainwell/training/builders.py",
        "    compat.drop_logger_advert()\n",
        "",
        (
            "tests/training/test_train_script.py::"
            "test_eval_reproduces_the_best_checkpoint_test_metric",
        ),
        "third-party noise the template knows to be expected is not printed",
    ),
    Mutant(
        "start-up: torch imported again before the command line is checked",
        "src/trainwell/io/checkpoint_read.py",
        "from typing import IO, Any\n\nfrom trainwell.errors import TrainwellError, first_line\n",
        "from typing import IO, Any\n\nimport torch  # noqa: F401\n\n"
        "from trainwell.errors import TrainwellError, first_line\n",
        ("tests/test_startup.py::test_a_mistake_is_one_line_before_torch_lightning_torchvision",),
        "a mistyped key, value or checkpoint path is answered before torch is imported (< 1 s)",
    ),
    # Cross-validation (cv.folds=K): folds, leak refusal, out-of-fold outputs, resume; pruning.
    Mutant(
        "cv: folds shuffled but not stratified by label",
        CV,
        "        splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)",
        "        splitter = KFold(n_splits=k, shuffle=True, random_state=seed)",
        (CV_FOLDS_T,),
        "each fold's class counts are within one sample of the whole's proportions",
    ),
    Mutant(
        "cv: a fold trains on its own validation samples",
        CV,
        "for j, v in enumerate(self.val) if j != fold]",
        "for j, v in enumerate(self.val)]",
        (CV_FOLDS_T,),
        "a fold never trains on the samples it is validated on",
    ),
    Mutant(
        "cv: digits fits mean/std on the fold's train+val samples",
        "src/project/data/digits.py",
        "            self.mean = float(images[train].mean())",
        "            self.mean = float(images[np.concatenate([train, val])].mean())",
        (CV_STATS_T,),
        "a fold's statistics come from its training part only and travel in its checkpoints",
    ),
    Mutant(
        "cv: the leak probe is skipped",
        "src/trainwell/training/cv/data_hook.py",
        "    if not state:\n",
        "    if state is not None:\n",
        (CV_LEAK_T,),
        "a datamodule fitting statistics beyond the fold's training part is refused",
    ),
    Mutant(
        "cv: the out-of-fold accuracy is a mean of per-fold means",
        "src/trainwell/training/cv/oof.py",
        '        oof["acc"] = sum(r[2] == r[-1] for r in all_rows) / len(all_rows)',
        '        oof["acc"] = sum(f["acc"] for f in per_fold) / len(per_fold)',
        (CV_OOF_T,),
        "the OOF figure is over all samples (the size-weighted mean of the folds)",
    ),
    Mutant(
        "cv: out-of-fold predictions with dropout active",
        "src/trainwell/training/cv/oof.py",
        "    module.eval()\n",
        "",
        (CV_OOF_T,),
        "the OOF rows are the best checkpoint's validation in eval mode, sample for sample",
    ),
    Mutant(
        "cv: every fold starts fresh on resume",
        "src/trainwell/training/cv/run.py",
        "        out.test = False\n",
        "        out.test = False\n        out.resume = None\n",
        (CV_RESUME_T,),
        "resume=auto reruns no finished fold and continues the interrupted one exactly",
    ),
    Mutant(
        "pruning: the pruner is never asked",
        "src/trainwell/callbacks/pruning.py",
        "        pruned = math.isnan(value) or bool(pruner.prune(study, mine))",
        "        pruned = math.isnan(value)",
        (PRUNE_STEP_T, PRUNE_CV_T),
        "a trial (per validation, or per fold under cv.folds) stops when the pruner says so",
    ),
    Mutant(
        "pruning: the sweeper records a pruned trial as failed",
        SEARCH,
        "        self._record(study, trial, state=TrialState.PRUNED)",
        "        self._record(study, trial, state=TrialState.FAIL)",
        (PRUNE_SWEEP_T,),
        "pruned trials are recorded as pruned",
    ),
    Mutant(
        "pruning: the per-validation report is not installed in a search trial",
        "src/trainwell/training/run.py",
        "        callbacks.append(OptunaPruning(pruning))",
        "        pass",
        (PRUNE_EPOCH_T,),
        "a single-split trial reports after every validation and stops when hopeless",
    ),
    # -- shipping as docs/shipping.md writes it, on code we did not write ---------------------
    Mutant(
        "serve: the run dir needs a run_id that serve's config lacks",
        "conf/hydra/default.yaml",
        "  dir: ${paths.log_dir}/${task_name}/runs/${tw.run_id:${oc.select:run_id,null}}",
        "  dir: ${paths.log_dir}/${task_name}/runs/${tw.run_id:${run_id}}",
        (f"{SERVE_T}::test_the_readme_line_serves_and_ctrl_c_stops_it_with_one_line",),
        "python scripts/serve.py artifact=<export> port=8000, as docs/shipping.md writes it, serves",
    ),
    Mutant(
        "serve: an inference worker dies of Ctrl-C with a traceback",
        SERVE,
        "        signal.signal(signal.SIGINT, signal.SIG_IGN)",
        "        pass",
        (f"{SERVE_T}::test_the_readme_line_serves_and_ctrl_c_stops_it_with_one_line",),
        "Ctrl-C stops the server with one line and no traceback",
    ),
    Mutant(
        "serve request validation: nesting deeper than a sample is not refused",
        "src/trainwell/deploy/request.py",
        "        if depth == 0:",
        "        if False:",
        (
            "tests/deploy/test_request.py::test_deep_nesting_is_one_4xx_line_never_a_recursion_error",
        ),
        "deeply nested JSON is a one-line 4xx, never a 500 or a RecursionError",
    ),
    Mutant(
        "serve request validation: JSON nested past the recursion limit is a 500",
        "src/trainwell/deploy/request.py",
        "    except RecursionError:",
        "    except MemoryError:",
        (
            "tests/deploy/test_request.py::test_deep_nesting_is_one_4xx_line_never_a_recursion_error",
        ),
        "deeply nested JSON is a one-line 4xx, never a 500 or a RecursionError",
    ),
    Mutant(
        "serve request validation: 1e39 reaches a float32 model as infinity",
        "src/trainwell/deploy/input_spec.py",
        "            if not np.isfinite(cast).all():",
        "            if False:",
        (
            "tests/deploy/test_input_spec.py::"
            "test_each_former_disagreement_gets_one_answer_on_every_path",
        ),
        "a value that float32 cannot hold is a one-line 4xx even without a value range",
    ),
    Mutant(
        "predict: an earlier predictions file is replaced without the flag",
        "src/trainwell/deploy/outputs.py",
        "    if path.exists() and not overwrite:",
        "    if False:",
        (
            "tests/deploy/test_outputs.py::"
            "test_a_prediction_file_is_named_after_its_data_and_never_replaced_without_the_flag",
        ),
        "an existing predictions file is replaced only with overwrite=true",
    ),
    Mutant(
        "export: another checkpoint's export is replaced silently",
        "src/trainwell/deploy/outputs.py",
        '    if source.get("sha256") == checkpoint_sha256:',
        "    if True:",
        (
            "tests/deploy/test_outputs.py::"
            "test_only_the_same_checkpoint_replaces_an_export_without_the_flag",
        ),
        "only an export of the same checkpoint replaces export/ without overwrite=true",
    ),
    Mutant(
        "predict/export: empty run dirs pile up under logs/",
        "src/trainwell/deploy/outputs.py",
        "    for directory in (run_dir, above, above.parent) if layout else (run_dir,):",
        "    for directory in ():",
        (
            "tests/deploy/test_outputs.py::"
            "test_an_empty_run_dir_of_predict_or_export_is_removed_and_nothing_else",
        ),
        "predict and export leave no empty run dir of their own",
    ),
    Mutant(
        "export: the ONNX graph's axes keep torch.export's symbol names",
        "src/trainwell/deploy/export.py",
        "                dim.dim_param = names[dim.dim_param]",
        "                pass",
        ("tests/deploy/test_outputs.py::test_the_onnx_axes_carry_the_manifest_names",),
        "the ONNX input's dynamic axes carry the manifest's names (batch, sequence)",
    ),
    Mutant(
        "deploy: a datamodule without state is refused as missing its statistics",
        "src/trainwell/deploy/loading.py",
        "    if datamodule.state_dict():\n        key = type(datamodule).__qualname__",
        "    if type(datamodule).state_dict is not L.LightningDataModule.state_dict:\n"
        "        key = type(datamodule).__qualname__",
        (
            "tests/ecosystem/test_corpus.py::"
            "test_foreign_module_trains_passes_the_doctor_and_predicts_and_exports[hydra_template]",
        ),
        "a datamodule whose state_dict() is empty predicts and exports without an error",
    ),
    Mutant(
        "deploy: a forward that cannot take the split's batches is a traceback",
        RAW,
        "    except (RuntimeError, TypeError, ValueError, IndexError) as err:",
        "    except KeyError as err:",
        ("tests/deploy/test_raw_form.py::test_a_forward_that_cannot_take_the_batch_is_one_line",),
        "a module whose forward cannot take the data is refused at predict/export in one line",
    ),
    Mutant(
        "load_from_checkpoint: the module comes back in training mode",
        "src/trainwell/blocks/checkpoint_loading.py",
        "        return module if map_location is None else module.to(map_location)",
        "        return module.train()",
        ("tests/blocks/test_load_from_checkpoint.py",),
        "Task.load_from_checkpoint(path) returns load_trained(path)'s module, in eval mode",
    ),
    Mutant(
        "doctor: the probe settings are checked only after the experiment is loaded",
        "scripts/doctor.py",
        '    check_paths=lambda cfg: ProbeSettings.from_cfg(cfg.get("probe")),\n',
        "",
        (
            "tests/test_startup.py::test_a_mistake_is_one_line_before_torch_lightning_torchvision"
            "[doctor.py +probe.nonsense=1]",
        ),
        "a mistyped probe setting is one line before torch is imported, and no run dir is made",
    ),
    Mutant(
        "doctor: a probe setting of the wrong type is taken as given",
        "src/trainwell/doctor/harness/settings.py",
        "if not fits or isinstance(value, bool):",
        "if False:",
        (
            "tests/test_startup.py::test_a_mistake_is_one_line_before_torch_lightning_torchvision"
            "[doctor.py probe.batch_size=abc]",
        ),
        "probe.batch_size=abc is refused in one line, not a crash minutes into the doctor",
    ),
    Mutant(
        "serve: every signal restarts the shutdown, the second one aborting it",
        "src/trainwell/deploy/shutdown.py",
        "        if len(stopped_by) == 1:\n            raise KeyboardInterrupt\n",
        "        raise KeyboardInterrupt\n",
        (f"{SERVE_T}::test_the_readme_line_serves_and_ctrl_c_stops_it_with_one_line",),
        "a second signal during the drain (make serve passes SIGTERM on) stops with one line",
    ),
    # -- the doctor's invariants, measured on the running task and loader -------------------
    Mutant(
        "doctor optimizer.coverage: frozen tensors that move go unnoticed",
        "src/trainwell/doctor/checks/structure.py",
        "    if changes:\n        params = ",
        "    if False:\n        params = ",
        (f"{INV_T}[frozen_max_norm]",),
        "what does not train does not change: a frozen tensor that moves is flagged",
    ),
    Mutant(
        "doctor eval.determinism: logged values are not compared between passes",
        "src/trainwell/doctor/checks/modes.py",
        "        if drift:",
        "        if False:",
        (f"{INV_T}[loss_list_never_cleared]",),
        "same weights, same data, same logged numbers, whatever ran in between",
    ),
    Mutant(
        "doctor eval.determinism: test passes are never repeated",
        "src/trainwell/doctor/checks/modes.py",
        '    named = {"validate": "validation", "test": "test"}',
        '    named = {"validate": "validation"}',
        (f"{INV_T}[noisy_test_step]",),
        "the same weights give the same test numbers too",
    ),
    Mutant(
        "doctor data.epoch_order: a stream repeated every epoch passes",
        "src/trainwell/doctor/checks/order.py",
        "    if first == second and len(first) > 1:",
        "    if first == second and len(first) > 10**9:",
        (f"{INV_T}[stream_reseeded_each_epoch]",),
        "every epoch is a new order, whatever the loader",
    ),
    Mutant(
        "doctor data.epoch_order: a second epoch that runs dry passes",
        "src/trainwell/doctor/checks/order.py",
        "    if not first or len(second) < len(first):",
        "    if False:",
        (f"{INV_T}[stream_exhausted_after_one_epoch]",),
        "every epoch is a full pass, whatever the loader",
    ),
    Mutant(
        "doctor data.leakage: train is hashed as far as its first batch",
        "src/trainwell/doctor/checks/data.py",
        "    train_hashes = set(content(ctx.samples.loader, limit, _inputs))",
        "    train_hashes = set(content(ctx.samples.loader, 1, _inputs))",
        (
            f"{INV_T}[val_split_from_the_stream]",
            "tests/doctor/test_museum.py::test_planted_bug_is_caught[train/val overlap]",
            "tests/doctor/test_invariants.py::"
            "test_a_split_copied_from_train_is_named_as_identical_not_as_near_copies",
        ),
        "val samples that also occur in train are found, on a map-style or iterable dataset",
    ),
    Mutant(
        "doctor data.class_balance: a stream's labels are never counted",
        CLASS_BALANCE,
        "        if not torch.is_tensor(y) or y.dim() != 1",
        "        if True or not torch.is_tensor(y) or y.dim() != 1",
        (f"{INV_T}[long_tailed_stream]",),
        "the classes of an iterable dataset are counted from the batches it yields",
    ),
    Mutant(
        "doctor data.class_balance: a stream's collapse is never judged",
        CLASS_BALANCE,
        "            return concat([row for c in classes for row in kept[c][:per_class]])",
        '            raise ConcatError("never joined")',
        (f"{INV_T}[long_tailed_stream]",),
        "predictions collapsed onto the majority class fail on an iterable dataset too",
    ),
    Mutant(
        "doctor data.worker_seeding: a stream's workers are never read together",
        "src/trainwell/doctor/checks/loading.py",
        "stream = content(_like(real, real.dataset, real.batch_size, n), STREAM_COMPARED)",
        "stream = content(_like(real, real.dataset, real.batch_size, 0), STREAM_COMPARED)",
        (f"{INV_T}[stream_copied_to_every_worker]",),
        "workers that yield the same samples of an iterable dataset are caught",
    ),
    Mutant(
        "doctor data.throughput: one busy moment of the machine is a data bottleneck",
        "src/trainwell/doctor/checks/loading.py",
        "        if not isinstance(again, str) and _quietest(*again, span)[0] < fraction:",
        "        if False:",
        ("tests/doctor/test_museum.py::test_a_busy_moment_of_the_machine_is_no_data_bottleneck",),
        "a fail on time needs the wait to repeat: a busy shared machine makes no test red",
    ),
    Mutant(
        "doctor data.throughput: the typical batch's wait is the loader's, however busy the machine",
        "src/trainwell/doctor/checks/loading.py",
        "    waited, computed = min(waits), min(steps)",
        "    waited, computed = statistics.median(waits), statistics.median(steps)",
        (
            "tests/doctor/test_museum.py::"
            "test_a_machine_busy_through_every_measurement_is_no_data_bottleneck",
        ),
        "a verdict on time reads the quietest round: preemption only adds time",
    ),
    Mutant(
        "doctor checkpoint.roundtrip: the next step after loading is not compared",
        "src/trainwell/doctor/checks/checkpoint.py",
        "    if apart > 1e-6:",
        "    if apart > 1e9:",
        (f"{INV_T}[private_noise_generator]",),
        "what is saved is what runs: a loaded task takes the same next step",
    ),
    Mutant(
        "doctor grad.flow: finite differences never disagree with autograd",
        "src/trainwell/doctor/checks/gradients.py",
        "if off <= RTOL",
        "if off <= 1e9 * RTOL",
        (f"{INV_T}[custom_backward_wrong]",),
        "gradients match the loss: autograd agrees with finite differences",
    ),
    Mutant(
        "doctor loss.padding: a loss that moves with the padding passes",
        "src/trainwell/doctor/checks/batch_edits.py",
        "isinstance(value, float) and abs(value - before) > 1e-5 * max(1.0, abs(before)):",
        "isinstance(value, float) and abs(value - before) > 1e9:",
        (f"{INV_T}[mean_over_padding]",),
        "inputs that must not matter do not matter: padding never moves the loss",
    ),
    Mutant(
        "doctor loss.padding: lengths never tell where padding starts",
        "src/trainwell/doctor/harness/batches.py",
        "(pad := _from_lengths(lengths, t))",
        "(pad := None)",
        (f"{INV_T}[rnn_last_step_over_padding]",),
        "padding told by a lengths tensor is measured, not skipped",
    ),
    Mutant(
        "doctor loss.padding: a pad id never tells where padding is",
        "src/trainwell/doctor/harness/batches.py",
        "(pad := _trailing_fill(t))",
        "(pad := None)",
        (f"{INV_T}[pad_ids_averaged_in]",),
        "padding told by the pad id filling the rows' ends is measured, not skipped",
    ),
    Mutant(
        "doctor loss.padding: an end-of-sequence id that ends rows once is taken for padding",
        "src/trainwell/doctor/harness/batches.py",
        "and int(runs.max()) >= 2:",
        "and int(runs.max()) >= 1:",
        (
            "tests/doctor/test_harness.py::"
            "test_padding_is_told_by_a_mask_lengths_or_a_pad_id_but_not_by_an_end_of_sequence_id",
        ),
        "a real token is never rewritten as padding (no false alarm)",
    ),
    Mutant(
        "doctor loss.padding: a batch padded by its pad id is never padded further",
        "src/trainwell/doctor/checks/batch_edits.py",
        '        edits.append((f"padding every row with {EXTRA} more pad ids", further, True))',
        "        pass",
        (f"{INV_T}[pad_ids_averaged_in]",),
        "a model that pools over pad ids fails even when no other tensor marks the padding",
    ),
    Mutant(
        "doctor loss.padding: a model refusing rows padded further skips the whole check",
        "src/trainwell/doctor/checks/batch_edits.py",
        'more pad ids", further, True))',
        'more pad ids", further, False))',
        (f"{INV_T}[fixed_width_tags_count_padding]",),
        "a model of one row width is still tested by rewriting its padded labels",
    ),
    Mutant(
        "doctor loss.padding: the tensor that marks the padding is rewritten too",
        "src/trainwell/doctor/checks/batch_edits.py",
        "        if path == padding.marker or",
        "        if False or",
        (f"{INV_T}[pad_ids_averaged_in]",),
        "a model that reads padding from its pad id is not failed for it (no false alarm)",
    ),
    Mutant(
        "doctor schedule.interval: the LR seen is not compared with the scheduler's curve",
        "src/trainwell/doctor/checks/schedule.py",
        "math.isclose(lr, curve[want - first], rel_tol=1e-5)",
        "math.isclose(lr, curve[want - first], rel_tol=1e9)",
        (f"{INV_T}[cosine_epochs_stepped_per_step]",),
        "the schedule matches the plan: the LR at each step is the curve at the planned pace",
    ),
    Mutant(
        "doctor data.split_agreement: validation at chance after a fit that learnt passes",
        "src/trainwell/doctor/checks/predictions.py",
        '    if va["accuracy"] > va["chance"] + va["sigma3"]:',
        '    if va["accuracy"] > -1.0:',
        (f"{INV_T}[val_labels_shuffled_apart]",),
        "validation measures what training learns: labels kept with their inputs",
    ),
    Mutant(
        "doctor data.split_agreement: dict batches are not scored",
        "src/trainwell/doctor/harness/outputs.py",
        "    return read if not isinstance(read, str) else _loss_scores(ctx, task, batches)",
        "    return read",
        (f"{INV_T}[dict_val_labels_shuffled_apart]",),
        "validation measures what training learns, whatever the batch structure",
    ),
    Mutant(
        "doctor data.split_agreement: labels per position (tokens, tags) are not scored",
        "src/trainwell/doctor/harness/outputs.py",
        "    per_item = scores.shape[:1] + scores.shape[2:]",
        "    per_item = scores.shape[:1]",
        (
            f"{INV_T}[val_tags_one_position_off]",
            "tests/doctor/test_invariants.py::test_labels_per_position_are_scored_at_real_positions_only",
        ),
        "validation measures what training learns, also where each position has its label",
    ),
    Mutant(
        "doctor data.split_agreement: padded positions are scored",
        "src/trainwell/doctor/harness/outputs.py",
        "        keep &= ~padding.pad.to(true.device).flatten()",
        "        pass",
        (
            "tests/doctor/test_invariants.py::test_labels_per_position_are_scored_at_real_positions_only",
        ),
        "only real positions count toward per-position accuracy",
    ),
    Mutant(
        "doctor data.split_agreement: ignored labels are scored",
        "src/trainwell/doctor/harness/outputs.py",
        "        keep &= true != call.ignore_index",
        "        pass",
        (
            "tests/doctor/test_invariants.py::test_labels_per_position_are_scored_at_real_positions_only",
        ),
        "labels the loss ignores are not scored",
    ),
    Mutant(
        "doctor accumulation.equivalence: a manual task with several optimizers is skipped",
        "src/trainwell/doctor/checks/manual_accumulation.py",
        "    if not steps:\n",
        "    if not steps or watch.optimizers > 1:\n",
        (f"{INV_T}[manual_head_steps_every_micro_batch]",),
        "manual accumulation equals one batch, per optimizer on its own parameters",
    ),
    Mutant(
        "doctor accumulation.equivalence: a manual reduction='sum' loss is not measured",
        "src/trainwell/doctor/checks/manual_accumulation.py",
        'reduction not in ("mean", "sum")',
        'reduction not in ("mean",)',
        (f"{INV_T}[manual_summed_loss_divided]",),
        "manual accumulation equals one batch, for summed losses too",
    ),
    Mutant(
        "doctor accumulation.equivalence: a manual step scaled with nothing combined fails",
        "src/trainwell/doctor/checks/manual_accumulation.py",
        "        if n > 1:\n            return verdict\n",
        "        if True:\n            return verdict\n",
        (f"{INV_T}[manual_loss_halved_without_accumulation]",),
        "a verdict depends on the run: harmless without accumulation warns, never fails",
    ),
    Mutant(
        "two rooms: the engine imports an example datamodule",
        "src/trainwell/deploy/raw.py",
        "from trainwell.errors import TrainwellError, first_line",
        "from project.data.digits import DigitsDataModule  # noqa: F401\n"
        "from trainwell.errors import TrainwellError, first_line",
        ("tests/test_layout.py::test_the_engine_imports_nothing_of_the_room",),
        "the engine imports nothing of the cloner's room: deleting an example cannot break it",
    ),
    Mutant(
        "moved classes: a run from before the examples moved names a net that no longer imports",
        "src/trainwell/io/moved_targets.py",
        '    ("trainwell.models.", "project.models."),\n',
        "",
        (
            "tests/io/test_moved_targets.py::test_the_python_api_rebuilds_a_run_from_before_the_move",
        ),
        "checkpoints written before an upgrade still load",
    ),
    Mutant(
        "saved config: ${tw.*} left unresolved outside the scripts",
        "src/trainwell/io/moved_targets.py",
        "    from trainwell.resolvers import register\n\n    register()\n",
        "",
        (
            "tests/io/test_moved_targets.py::test_the_python_api_rebuilds_a_run_from_before_the_move",
        ),
        "load_trained works from a plain python -c or a notebook",
    ),
]

UPGRADE = "scripts/upgrade.py"
UPGRADE_T = "tests/test_upgrade.py"
MUTANTS += [
    Mutant(
        "upgrade: uncommitted changes are not refused",
        UPGRADE,
        "    if changed:",
        "    if False:",
        (f"{UPGRADE_T}::test_uncommitted_changes_are_refused_in_one_line_and_nothing_changes",),
        "make upgrade starts only on a committed clone, so nothing uncommitted is mixed in or lost",
    ),
    Mutant(
        "upgrade: a file the cloner deleted comes back with the release's version",
        UPGRADE,
        'git_out("rm", "--quiet", "--", *deleted)',
        'git_out("add", "--", *deleted)',
        (f"{UPGRADE_T}::test_files_the_cloner_deleted_stay_deleted_when_the_release_changed_them",),
        "files the cloner deleted stay deleted, also when the release changed them",
    ),
    Mutant(
        "upgrade: a file both sides changed is committed instead of stopping",
        UPGRADE,
        "    if conflicts:",
        "    if False:",
        (
            f"{UPGRADE_T}::test_a_file_both_sides_changed_stops_with_markers_and_nothing_of_the_cloners_is_lost",
        ),
        "a conflict stops with git's markers and one line naming the files",
    ),
]

SUMMARY_T = "tests/summary/test_summary.py"
SUMMARY_SWEEP_T = "tests/training/test_sweep_summary.py"
CV_T = "tests/training/test_cross_validation.py"
MUTANTS += [
    Mutant(
        "summary: the std divides by n (ddof=0)",
        "src/trainwell/summary/stats.py",
        "/ (n - 1)) if n > 1 else None",
        "/ n) if n > 1 else None",
        (
            f"{SUMMARY_T}::test_seeds_are_pooled_and_each_group_has_n_mean_sample_std_min_max",
            f"{SUMMARY_SWEEP_T}::test_a_sweep_of_seeds_and_lrs_gives_two_groups_of_three_from_the_jobs_results",
        ),
        "each group's std is the sample std over its jobs (ddof=1)",
    ),
    Mutant(
        "summary: the seed is a group key",
        "src/trainwell/summary/build.py",
        "    pooled = set(settings.pool)\n",
        "    pooled = set()\n",
        (
            f"{SUMMARY_T}::test_seeds_are_pooled_and_each_group_has_n_mean_sample_std_min_max",
            f"{SUMMARY_SWEEP_T}::test_a_sweep_of_seeds_and_lrs_gives_two_groups_of_three_from_the_jobs_results",
        ),
        "jobs that differ only in their seed (summary.pool) form one group",
    ),
    Mutant(
        "summary: a job the sweep's overrides give but no dir holds goes unnamed",
        "src/trainwell/summary/jobs.py",
        "    missing = [job for job in expected or [] if tuple(job.overrides) not in have]",
        "    missing = []",
        (
            f"{SUMMARY_T}::test_summarize_names_a_removed_job_and_its_group_has_n_2",
            f"{SUMMARY_SWEEP_T}::test_summarize_rebuilds_a_copied_sweep_and_names_a_removed_job",
        ),
        "summarize.py names every expected job that is not there, and its group counts n without it",
    ),
    Mutant(
        "summary: a sweep relaunched with resume=auto splits into new groups",
        "src/trainwell/summary/jobs.py",
        '_BOOKKEEPING = frozenset({"run_id", "resume"})',
        '_BOOKKEEPING = frozenset({"run_id"})',
        (f"{SUMMARY_T}::test_a_relaunch_with_resume_auto_is_the_same_sweep",),
        "a killed sweep relaunched with resume=auto ends with the uninterrupted sweep's summary",
    ),
    Mutant(
        "summary: written only when the sweep ends, not as each job ends",
        "src/trainwell/summary/callback.py",
        "            update_summary(sweep_dir)\n",
        "",
        (f"{SUMMARY_T}::test_each_jobs_end_updates_the_summary_and_records_why_it_failed",),
        "a partial (or killed) sweep has a partial summary",
    ),
    Mutant(
        "summary: a job started again keeps its earlier attempt's failure",
        "src/trainwell/summary/callback.py",
        "        (Path(config.hydra.runtime.output_dir) / FAILURE_FILE).unlink(missing_ok=True)\n",
        "",
        (f"{SUMMARY_T}::test_each_jobs_end_updates_the_summary_and_records_why_it_failed",),
        "a relaunched job is judged by its latest attempt",
    ),
    Mutant(
        "summary: rows sorted as if every metric were maximized",
        "src/trainwell/summary/build.py",
        '    return (0, -mean if mode == "max" else mean)',
        "    return (0, -mean)",
        (f"{SUMMARY_T}::test_rows_are_sorted_by_the_monitored_metric_in_its_mode",),
        "rows are sorted by the optimized metric in its mode, best first",
    ),
    Mutant(
        "summary: a study's best trial ignores the direction",
        "src/trainwell/summary/build.py",
        "(value > best[1] if maximize else value < best[1])",
        "value < best[1]",
        (
            f"{SUMMARY_T}::test_a_study_has_its_best_trial_and_pruned_count",
            f"{SEARCH_T}::test_a_maximized_sweep_of_another_metric_picks_the_largest",
        ),
        "a study's summary names the trial its direction makes best",
    ),
    Mutant(
        "cv: the run ends without printing its figures",
        "src/trainwell/training/cv/run.py",
        '        announce(cv_line(results["cv"]))\n',
        "",
        (f"{CV_T}::test_the_run_ends_with_mean_std_and_out_of_fold_figures_and_its_summary",),
        "a cross-validation run ends by printing mean ± std and the out-of-fold figure",
    ),
    Mutant(
        "cv: out-of-fold probability columns by class number",
        "src/trainwell/training/cv/oof.py",
        "*probability_columns(classes, probs.shape[1])]",
        '*(f"p_{c}" for c in range(probs.shape[1]))]',
        (f"{CV_T}::test_oof_probability_columns_are_named_as_predictions_name_them",),
        "oof_predictions.csv names its probability columns as predictions do",
    ),
]

CKPT_STATE_T = "tests/io/test_checkpoint_state.py"
STEP0_T = "tests/training/test_state_at_step_zero.py"
MUTANTS += [
    Mutant(
        "checkpoint state: what was saved as data is read back as that data",
        "src/trainwell/io/checkpoint_read.py",
        "    return decode_state(checkpoint)",
        "    return checkpoint",
        (
            f"{CKPT_STATE_T}::test_every_kind_at_once_and_nothing_changed_in_place",
            f"{STEP0_T}::test_numpy_statistics_train_and_test_and_come_back_as_numpy_to_the_bit",
        ),
        "state people keep comes back as the types it was (a frozenset as a frozenset)",
    ),
    Mutant(
        "checkpoint state: what numpy's allowlist cannot read is pickled into the checkpoint",
        "src/trainwell/io/hparams.py",
        "    return (encode_state(out) if encode else out), converted",
        "    return out, converted",
        (f"{CKPT_STATE_T}::test_every_kind_at_once_and_nothing_changed_in_place",),
        "every value people keep is saved in a form weights_only=True loads with numpy allowed",
    ),
    Mutant(
        "checkpoint state: trainwell's reader does not allow numpy's arrays and scalars",
        "src/trainwell/io/checkpoint_read.py",
        "        with numpy_allowed():",
        "        with torch.serialization.safe_globals([]):",
        (
            f"{CKPT_STATE_T}::test_every_kind_at_once_and_nothing_changed_in_place",
            f"{STEP0_T}::test_numpy_statistics_train_and_test_and_come_back_as_numpy_to_the_bit",
        ),
        "numpy state is stored as numpy and every trainwell load reads it",
    ),
    Mutant(
        "checkpoint state: an empty or big-endian array is stored as numpy",
        "src/trainwell/io/checkpoint_state.py",
        "        if value.dtype.isnative and value.nbytes:",
        "        if True:",
        (f"{CKPT_STATE_T}::test_every_kind_at_once_and_nothing_changed_in_place",),
        "what the allowlist cannot read (no data, a foreign byte order) comes back to the bit",
    ),
    Mutant(
        "checkpoint writes: a background save keeps a reference to the datamodule's arrays",
        "src/trainwell/io/checkpoint_write.py",
        "    if kind is np.ndarray or kind is bytearray:",
        "    if False:",
        (f"{CKPT_STATE_T}::test_a_background_save_writes_the_numpy_state_of_its_moment",),
        "a checkpoint holds the state of the step it was saved at, written off the step",
    ),
    Mutant(
        "checkpoint state: a numpy scalar comes back as a 0-d array",
        "src/trainwell/io/checkpoint_state.py",
        "        return _read_array(value)[()]",
        "        return _read_array(value)",
        (f"{CKPT_STATE_T}::test_every_kind_at_once_and_nothing_changed_in_place",),
        "an np.float64 comes back as an np.float64",
    ),
    Mutant(
        "step 0: the run's checkpoint is not written and read back before training",
        "src/trainwell/callbacks/checkpoint_rehearsal.py",
        "        rehearsal = rehearse(trainer, payloads=False)\n",
        "        return\n",
        (
            f"{STEP0_T}::test_a_value_no_checkpoint_can_hold_stops_the_run_before_its_first_training_step",
        ),
        "what can be known at step 0 is reported at step 0, before any training",
    ),
    Mutant(
        "step 0: the rehearsal carries every tensor payload (2x the checkpoint in memory)",
        "src/trainwell/io/checkpoint_write.py",
        "                prepared = _without_payloads(prepared)\n",
        "                pass\n",
        (
            f"{CKPT_STATE_T}::"
            "test_the_step0_rehearsal_carries_structure_types_and_numpy_metadata_not_payloads",
        ),
        "the step-0 check's extra memory is that of the non-tensor state",
    ),
    Mutant(
        "step 0: a stand-in loses the tensor's shape",
        "src/trainwell/io/checkpoint_write.py",
        "    return torch.zeros((), dtype=tensor.dtype).expand(tensor.shape)",
        "    return torch.zeros((), dtype=tensor.dtype)",
        (
            f"{CKPT_STATE_T}::"
            "test_the_step0_rehearsal_carries_structure_types_and_numpy_metadata_not_payloads",
        ),
        "the step-0 check still sees each numpy array's dtype and shape come back",
    ),
    Mutant(
        "doctor: checkpoint.roundtrip saves the task without the datamodule's state",
        "src/trainwell/doctor/checks/checkpoint.py",
        "rehearsal = rehearse(trainer, ctx.datamodule)",
        "rehearsal = rehearse(trainer)",
        (f"{STEP0_T}::test_the_doctor_judges_the_datamodules_state_as_the_run_does",),
        "the doctor's checkpoint check makes the run's step-0 save and load",
    ),
    Mutant(
        "converter: a checkpoint trainwell wrote is encoded twice",
        "src/trainwell/io/hparams.py",
        "    checkpoint = decode_state(checkpoint)\n",
        "",
        (
            f"{STEP0_T}::test_a_refused_checkpoint_names_the_converter_and_the_converter_reads_back_numpy",
        ),
        "the refusal's suggested command works, also on a file it already converted",
    ),
]

INPUT_SPEC = "src/trainwell/deploy/input_spec.py"
ONE_ANSWER = (  # the same samples as a JSON body, a .npy body and a .npy file: one answer
    "tests/deploy/test_input_spec.py::test_each_former_disagreement_gets_one_answer_on_every_path",
    "tests/deploy/test_input_paths.py::test_the_server_and_predict_refuse_with_the_same_line",
)
MUTANTS += [
    Mutant(
        "input spec: a row with no values on a dynamic axis reaches the model",
        INPUT_SPEC,
        "            if samples.shape[axis] == 0:",
        "            if False:",
        ONE_ANSWER,
        '{"inputs": [[]]} is a 400 from the server and exit 2 from predict, never a 500',
    ),
    Mutant(
        "input spec: float64 samples cast to float32 unchecked (1e39 becomes infinity)",
        INPUT_SPEC,
        '        if np.can_cast(samples.dtype, dtype, "safe"):',
        '        if np.can_cast(samples.dtype, dtype, "same_kind"):',
        ONE_ANSWER,
        "a float64 .npy holding 1e39 for a float32 model is refused, as the same value in JSON",
    ),
    Mutant(
        "input spec: a row of padding only passes",
        INPUT_SPEC,
        "        if empty.size or mixed.size:",
        "        if mixed.size:",
        ONE_ANSWER,
        "an all-padding row of token ids is refused by the server and predict alike",
    ),
    Mutant(
        "serve request: whole-number floats in JSON read as integers",
        "src/trainwell/deploy/request.py",
        '    floats = float in kinds if kinds is not None else _check_numbers(inputs, "inputs", depth)',
        "    floats = False",
        ONE_ANSWER,
        "3.0 for a uint8 model is refused over JSON as it is from a float .npy",
    ),
    Mutant(
        "export: parity samples are not checked by the input spec",
        "src/trainwell/deploy/export.py",
        "    samples = raw.spec.check(\n        samples, where=",
        "    samples = (lambda samples, where: samples)(\n        samples, where=",
        (
            "tests/deploy/test_input_paths.py::"
            "test_export_checks_the_samples_of_its_parity_run_by_the_same_spec",
        ),
        "a raw form whose own split breaks its input spec is one line and exit 2 at export",
    ),
    # -- every suggested fix works: each mutant makes one suggestion wrong -----------------------
    Mutant(
        "suggested fix: predict's refusal names the overwrite flag misspelled",
        "src/trainwell/deploy/outputs.py",
        '"{path} exists (an earlier prediction of the same data); pass overwrite=true to "',
        '"{path} exists (an earlier prediction of the same data); pass overwrites=true to "',
        (
            "tests/test_suggested_fixes.py::"
            "test_a_prediction_that_exists_is_replaced_with_the_flag_the_refusal_names",
        ),
        "the override a refusal prints, added to the same command line, makes it run",
    ),
    Mutant(
        "suggested fix: a new run is offered run_id= when the command line names hydra.run.dir",
        "src/trainwell/io/run_dir.py",
        '    if any(arg.split("=", 1)[0].lstrip("+") == key for arg in given):',
        "    if False:",
        (
            "tests/test_suggested_fixes.py::"
            "test_a_run_dir_given_by_hydra_run_dir_is_continued_or_left_as_the_refusal_says",
            "tests/test_suggested_fixes.py::"
            "test_a_run_dir_in_use_is_left_for_a_new_one_or_continued_once_its_run_ended",
        ),
        "a new run's override is the one that moves the run dir the command line names",
    ),
    Mutant(
        "suggested fix: the flag for a changed batch on resume named wrong",
        "src/trainwell/training/plan_callback.py",
        '"trainer.devices, or pass resume_allow_batch_change=true to continue anyway"',
        '"trainer.devices, or pass resume_allow_batch_changes=true to continue anyway"',
        (
            "tests/test_suggested_fixes.py::"
            "test_a_changed_batch_on_resume_goes_on_when_allowed_or_restored",
        ),
        "the flag a refused resume names lets the same command continue",
    ),
]

EMA = "src/trainwell/callbacks/ema.py"
EMA_T = "tests/training/test_ema.py"
EMA_DOCTOR_T = (
    "tests/doctor/test_averaging.py::test_an_average_updated_per_optimizer_step_and_saved_passes"
)
MUTANTS += [
    Mutant(
        "ema: the average is updated after every micro-batch",
        EMA,
        "        if step > self.latest_update_step and self.due(step - 1):",
        "        if self.due(step - 1):  # whether or not this micro-batch ended a step",
        (
            f"{EMA_T}::test_k4_micro_batches_of_16_average_as_k1_batches_of_64",
            f"{EMA_DOCTOR_T}[ema.decay]",
        ),
        "the average moves once per optimizer step: K updates per step under accumulation "
        "would decay it K times too fast",
    ),
    Mutant(
        "ema: the checkpoint keeps no average (state_dict left as the trained weights)",
        EMA,
        '        checkpoint["state_dict"] = averaged\n',
        "",
        (
            f"{EMA_T}::test_the_checkpoint_holds_the_average_the_trained_weights_and_the_count",
            f"{EMA_DOCTOR_T}[ema.decay]",
        ),
        "a checkpoint's state_dict is the average (eval, predict, export and serve load it) and "
        "a resume continues it",
    ),
]
SYNCS_TASK_T = (
    "src/project/tests/tasks/test_host_syncs.py::test_no_host_sync_in_the_steady_training_step"
)
SYNCS_ENGINE_T = (
    "tests/callbacks/test_host_syncs.py::test_the_template_callbacks_add_no_sync_to_a_steady_step"
)
CKPT_WRITE = "src/trainwell/io/checkpoint_write.py"
MUTANTS += [
    Mutant(
        "classification task: the training step reads a count off the device",
        "src/project/tasks/classification.py",
        "self.train_loss.update(loss, y.numel())",
        "self.train_loss.update(loss, int((y >= 0).sum()))",
        (f"{SYNCS_TASK_T}[default]",),
        "the template's task makes no host-device sync in a steady training step",
    ),
    Mutant(
        "LM task: the training loss and perplexity check every micro-batch for NaN on the host",
        "src/project/tasks/language_model.py",
        "self.train_loss, self.train_ppl = WeightedMean(), TrainingPerplexity()",
        "self.train_loss, self.train_ppl = MeanMetric(), Perplexity()",
        (f"{SYNCS_TASK_T}[lm]",),
        "the template's task makes no host-device sync in a steady training step",
    ),
    Mutant(
        "non-finite guard: reads the loss and gradients at every step on a GPU too",
        NONFIN,
        "eager = self.eager_on_cpu and cadence.host_reads_are_free(device)",
        "eager = self.eager_on_cpu",
        (f"{SYNCS_ENGINE_T}[1]",),
        "the template's callbacks make no host-device sync between logging steps",
    ),
    Mutant(
        "exact accumulation: reads each micro-batch's item count off the GPU",
        ACC,
        "    if cadence.host_reads_are_free(count.device):",
        '    if count.device.type != "meta":',
        (f"{SYNCS_TASK_T}[lm]",),
        "token-exact accumulation makes no host-device sync between logging steps",
    ),
    Mutant(
        "checkpoints: a save waits for its own write",
        CKPT_WRITE,
        "self._submit(self._write_snapshot, snapshot(checkpoint, lease.copy), Path(path), lease)",
        "self._submit(self._write_snapshot, snapshot(checkpoint, lease.copy), Path(path), lease)"
        "\n        self.flush()",
        (
            "tests/training/test_checkpoint_writes_off_the_step.py::"
            "test_the_next_epoch_trains_while_the_checkpoints_are_written",
        ),
        "checkpoint writes never hold the training thread: the next epoch trains meanwhile",
    ),
    Mutant(
        "checkpoints: a snapshot's buffers are lent out before its write is done",
        CKPT_WRITE,
        "            self._write_atomic(checkpoint, target)\n        finally:\n            lease.give_back()",
        "            lease.give_back()\n            self._write_atomic(checkpoint, target)\n"
        "        finally:\n            pass",
        (
            "tests/io/test_snapshot_buffers.py::"
            "test_a_snapshot_waiting_for_its_write_keeps_its_buffers",
        ),
        "a checkpoint holds the state at save time, whatever the training does meanwhile",
    ),
]

STYLE_T = "tests/test_style.py::test_make_format_fixes_what_make_lint_reports_on_ordinary_code"
MUTANTS += [
    Mutant(
        "style: make format leaves a lambda bound to a name for make lint to report",
        "pyproject.toml",
        'extend-safe-fixes = ["E731", "F841", "RUF059"]',
        'extend-safe-fixes = ["F841", "RUF059"]',
        (STYLE_T,),
        "make format fixes what make lint reports wherever ruff can",
    ),
]

LAYOUT_T = "tests/test_layout.py"
MUTANTS += [
    Mutant(
        "docs check: the config table check covers the cloner's groups too",
        LAYOUT_T,
        "table = {g: o for g, o in _group_table(repo).items() if g in ENGINE_GROUPS}",
        "table = _group_table(repo)",
        (
            f"{LAYOUT_T}::test_a_cloners_configs_added_committed_or_deleted_need_no_row_but_the_engines_do",
        ),
        "a config a cloner adds, commits or deletes in data/ model/ experiment/ hparams_search/ "
        "needs no edit to a template file",
    ),
]

TRAIN_SCRIPT_T = "tests/training/test_train_script.py"
MUTANTS += [
    Mutant(
        "run dir: results.json keeps the 0600 mode of its temp file",
        "src/trainwell/io/results.py",
        'prefix=".results-", suffix=".json")\n    try:\n        os.fchmod(fd, NEW_FILE_MODE)\n',
        'prefix=".results-", suffix=".json")\n    try:\n',
        (f"{TRAIN_SCRIPT_T}::test_every_file_of_the_run_dir_has_the_mode_the_umask_gives",),
        "every file of a run dir has the mode the umask gives",
    ),
    Mutant(
        "export: weights.safetensors keeps the 0600 mode safetensors gives it",
        "src/trainwell/deploy/export.py",
        "    as_new_file(path)  # safetensors writes 0600\n",
        "",
        (f"{OWNED_DEPLOY_T}::test_the_export_takes_raw_digits_and_answers_as_the_predictions",),
        "every exported file has the mode the umask gives",
    ),
    Mutant(
        "progress bar: epochs counted from 0 as Lightning counts them",
        "src/trainwell/callbacks/progress_bar.py",
        'text = f"Epoch {trainer.current_epoch + 1}"',
        'text = f"Epoch {trainer.current_epoch}"',
        (
            "tests/callbacks/test_progress_bar.py::test_the_bar_counts_epochs_from_one_as_max_epochs_and_the_closing_line_do",
        ),
        "the bar and the closing line count epochs alike",
    ),
    Mutant(
        "compat: runs print Lightning's LeafSpec deprecation",
        "src/trainwell/training/builders.py",
        "    compat.silence_lightning_leafspec_warning()\n",
        "",
        (f"{TRAIN_SCRIPT_T}::test_the_run_prints_no_warning_about_lightnings_own_code",),
        "a run prints no warning about Lightning's own code",
    ),
    Mutant(
        "compat: the LeafSpec filter silences the warning from any code",
        "src/trainwell/compat/noise.py",
        '"ignore", message=LEAFSPEC_MESSAGE, category=FutureWarning, module=LEAFSPEC_MODULE',
        '"ignore", message=LEAFSPEC_MESSAGE, category=FutureWarning',
        (
            "tests/test_compat.py::test_lightning_still_raises_torchs_leafspec_deprecation_and_only_its_own_is_silenced",
        ),
        "upstream warnings are silenced where upstream raises them, nowhere else",
    ),
    Mutant(
        "cli: a refused run leaves Hydra's bookkeeping behind",
        "src/trainwell/cli.py",
        "if exit_.code == EXIT_USAGE and before is not None:",
        "if False:",
        (
            "tests/io/test_refused_run.py::test_a_run_refused_in_its_job_leaves_no_run_dir",
            "tests/io/test_refused_run.py::test_a_run_refused_in_an_existing_run_dir_leaves_it_as_it_was",
        ),
        "a refused run leaves nothing new behind",
    ),
]

INTERP_T = "tests/training/test_interpolating_configs.py"
MUTANTS += [
    Mutant(
        "export: the manifest's config is resolved from a copy holding only model, data and seed",
        "src/trainwell/deploy/export.py",
        '"config": _manifest_config(run.cfg),',
        '"config": OmegaConf.to_container(\n'
        '                OmegaConf.masked_copy(run.cfg, ["model", "data", "seed"]), resolve=True\n'
        "            ),",
        (f"{INTERP_T}::test_export_writes_the_runs_config_resolved_in_its_manifest",),
        "every command resolves the run's whole config before it selects parts of it",
    ),
]

TARGETS = "src/trainwell/targets.py"
TARGETS_T = "tests/test_targets.py"
KEYWORDS = "src/trainwell/keywords.py"
KEYWORDS_T = "tests/test_keywords.py"
MUTANTS += [
    Mutant(
        "targets: a name its module does not define is let through",
        TARGETS,
        "if found is None or missing in found.names:",
        "if True:",
        (
            f"{TARGETS_T}::test_a_target_is_located_from_source_with_a_did_you_mean",
            f"{TARGETS_T}::test_a_mistyped_target_is_one_line_and_writes_nothing",
        ),
        "a mistyped _target_ is one line with a did-you-mean",
    ),
    Mutant(
        "targets: a refusal rests on the source reading alone",
        TARGETS,
        "    if problem is None or python_finds(target):\n",
        "    if problem is None:\n",
        (f"{TARGETS_T}::test_a_target_python_resolves_is_never_refused",),
        "a target Python resolves (lazy, namespace, run-time names) is never refused",
    ),
    Mutant(
        "targets: an error inside the checker stops the run",
        TARGETS,
        "    except Exception:  # a source this reading does not understand: instantiate checks it\n"
        "        return None\n",
        "    except ZeroDivisionError:\n        return None\n",
        (f"{TARGETS_T}::test_a_failing_reading_lets_the_run_go_on",),
        "the checker's own failure never stops a start",
    ),
    Mutant(
        "targets: a folder without __init__.py crashes the reading",
        TARGETS,
        "    except KeyError:\n",
        "    except LookupError if False else ZeroDivisionError:\n",
        (f"{TARGETS_T}::test_a_folder_without_init_is_found_without_importing",),
        "a namespace folder of the cloner's is found without importing",
    ),
    Mutant(
        "command line: targets are not checked before Hydra runs",
        "src/trainwell/command_line.py",
        "        or targets_problem(cfg)\n",
        "",
        (f"{TARGETS_T}::test_a_mistyped_target_is_one_line_and_writes_nothing",),
        "a mistyped _target_ on the command line or in a config file is answered before Hydra",
    ),
    Mutant(
        "keywords: a keyword the signature does not take is let through",
        KEYWORDS,
        "            if not sig.open and key not in sig.names:\n",
        "            if False:\n",
        (
            f"{KEYWORDS_T}::test_each_keyword_is_checked_against_the_signature_the_source_shows",
            f"{KEYWORDS_T}::test_a_misspelt_keyword_on_the_command_line_is_one_line",
        ),
        "a misspelt keyword is one line with a did-you-mean before torch",
    ),
    Mutant(
        "keywords: **kwargs the source does not show forwarded are refused",
        KEYWORDS,
        "        return Signature(frozenset(names), frozenset(required), open=True, defaults=defaults)\n",
        "        return Signature(frozenset(names), frozenset(required), open=False, defaults=defaults)\n",
        (f"{KEYWORDS_T}::test_each_keyword_is_checked_against_the_signature_the_source_shows",),
        "a signature the source does not fully show is never refused",
    ),
    Mutant(
        "keywords: a class decorator or metaclass is read as the plain __init__",
        KEYWORDS,
        "    if node.decorator_list or node.keywords or depth > _HOPS:\n",
        "    if depth > _HOPS:\n",
        (f"{KEYWORDS_T}::test_each_keyword_is_checked_against_the_signature_the_source_shows",),
        "a signature made at run time (dataclass, metaclass) is never refused",
    ),
    Mutant(
        "keywords: a _partial_ must give every required keyword",
        KEYWORDS,
        '        if missing and not node.get("_partial_") and "_args_" not in node:\n',
        '        if missing and "_args_" not in node:\n',
        (f"{KEYWORDS_T}::test_each_keyword_is_checked_against_the_signature_the_source_shows",),
        "a _partial_ may leave required keywords out",
    ),
    Mutant(
        "keywords: a bad keyword in a call the constructor makes reads as the config's",
        KEYWORDS,
        "            return None  # another call inside the constructor\n",
        "            pass\n",
        (f"{KEYWORDS_T}::test_an_unseen_forwarding_refused_at_instantiate_gets_the_same_line",),
        "only the config's own keyword is answered as bad input",
    ),
    Mutant(
        "command line: keywords are not checked before Hydra runs",
        "src/trainwell/command_line.py",
        "        or keyword_problem(cfg)\n",
        "",
        (f"{KEYWORDS_T}::test_a_misspelt_keyword_on_the_command_line_is_one_line",),
        "a misspelt keyword on the command line is answered before the run starts",
    ),
    Mutant(
        "command line: a multirun launches its jobs unchecked",
        "src/trainwell/command_line.py",
        '    if any(arg.startswith("-") and arg not in _MULTIRUN for arg in argv):\n',
        '    if any(arg.startswith("-") for arg in argv):\n',
        (f"{KEYWORDS_T}::test_a_multirun_checks_every_job_before_the_first",),
        "a multirun's every job is checked before the first is launched",
    ),
    Mutant(
        "targets: a module missing from a target's import chain goes unnamed",
        TARGETS,
        "            if find_spec(imported) is None:\n",
        "            if False:\n",
        (
            f"{TARGETS_T}::test_a_module_missing_from_the_import_chain_names_the_file_that_imports_it",
        ),
        "a module missing from a _target_'s import chain is named with the file that imports it",
    ),
    Mutant(
        "errors: a module missing at import time is a crash with a traceback",
        "src/trainwell/errors.py",
        "        if isinstance(seen, ModuleNotFoundError) and seen.name:",
        "        if False:",
        (
            f"{TARGETS_T}::test_a_module_missing_at_import_time_is_one_line_naming_the_importing_file",
        ),
        "a module missing at import time is one line naming the file that imports it",
    ),
]

DELETION_T = "tests/test_deletion.py"
MUTANTS += [
    Mutant(
        "room: a package face imports its example modules again",
        "src/project/data/__init__.py",
        'this face imports none of them, so deleting one leaves the others importable.\n"""\n',
        'this face imports none of them, so deleting one leaves the others importable.\n"""\n\n'
        "from project.data.synthetic import SyntheticDataModule  # noqa: F401\n",
        (f"{DELETION_T}::test_the_rooms_package_faces_import_nothing",),
        "deleting one example leaves the others importable",
    ),
    Mutant(
        "room: the language-model task imports the sequences datamodule",
        "src/project/tasks/language_model.py",
        "IGNORE_INDEX = -100\n",
        "from project.data.sequences import IGNORE_INDEX  # noqa: E402\n",
        (f"{DELETION_T}::test_no_example_imports_another_and_the_default_run_imports_none",),
        "each example stands alone, so deleting one leaves the others working",
    ),
    Mutant(
        "example marks: a test using a deleted example is not skipped",
        "tests/helpers/example_marks.py",
        "            item.add_marker(pytest.mark.skip(reason=f\"uses {', '.join(gone)}, deleted\"))",
        "            pass",
        (
            f"{DELETION_T}::test_a_test_using_a_deleted_example_is_skipped_and_its_file_not_imported",
        ),
        "make test passes in a clone that deleted an example",
    ),
    Mutant(
        "moved targets: a saved class named by its package face is no longer found",
        "src/trainwell/io/moved_targets.py",
        "    return relocated(name) or name\n",
        "    return name\n",
        ("tests/io/test_moved_targets.py::test_each_moved_name_reads_as_this_release_spells_it",),
        "runs saved before the room's faces stopped importing their classes still load",
    ),
    Mutant(
        "accumulation: a rank whose first batch is a padding copy skips the reference broadcast",
        ACC,
        "            count: int | torch.Tensor = 0  # a zero-weight copy: it counts no items\n",
        "            self._count = 0\n            return\n",
        ("tests/training/test_ddp_padding.py::test_fewer_batches_than_ranks_train_as_one_process",),
        "fewer batches than ranks: every rank joins the first step's collectives",
    ),
]

MANUAL_T = "tests/doctor/test_manual_forms.py"
SPLIT_T = (
    "tests/doctor/test_distribution_and_composition.py::"
    "test_a_feature_is_judged_by_location_and_spread_in_units_of_trains_spread"
)
NAMED_T = (
    "tests/doctor/test_distribution_and_composition.py::"
    "test_the_verdicts_name_the_split_the_feature_and_the_loader_setting"
)
RARE_T = (
    "tests/doctor/test_distribution_and_composition.py::"
    "test_a_feature_set_in_few_samples_may_be_blank_in_a_small_split"
)
MUTANTS += [
    Mutant(
        "doctor: a probe fit that resumes across epochs runs until its step comes",
        "src/trainwell/doctor/harness/context.py",
        "        if self.seen >= self.batches:",
        "        if False:",
        (f"{MANUAL_T}::test_a_resumed_step_the_probe_cannot_reach_is_named_and_never_waited_for",),
        "every probe is bounded: the doctor never hangs on a step it cannot reach",
    ),
    Mutant(
        "doctor overfit.one_batch: a fit that took no optimizer step fails as a flat loss",
        "src/trainwell/doctor/checks/overfit.py",
        '    if seen.kind == "flat" and not obs.recorder.step_grads:',
        "    if False:",
        (f"{MANUAL_T}::test_a_fit_that_takes_no_step_skips_the_checks_that_need_one",),
        "a probe that cannot reach a step skips, saying what it waited for; no false fail",
    ),
    Mutant(
        "doctor overfit.one_batch: a task stepping every K micro-batches is judged per micro-batch",
        "src/trainwell/doctor/harness/observe.py",
        "        if steps < self.min_steps and n < self.min_steps * self.patience and not over:\n"
        "            return\n"
        "        per_step = n / steps if steps else self.patience  # micro-batches per stepping one\n",
        "        if n < self.min_steps and not over:\n            return\n        per_step = 1\n",
        (
            f"{MANUAL_T}::test_the_one_batch_fit_counts_the_optimizer_steps_of_a_task_that_accumulates",
        ),
        "the one-batch fit judges a task on as many optimizer steps as any other",
    ),
    Mutant(
        "doctor grad.flow: a ReLU at its kink counts as a wrong gradient",
        "src/trainwell/doctor/checks/gradients.py",
        "                if abs((up - at) - (at - down)) / h >= off:",
        "                if False:",
        (
            "tests/doctor/test_zoo.py::test_a_relu_at_its_kink_is_left_out_of_the_finite_differences",
        ),
        "no warn on healthy code: finite differences only where the loss is smooth",
    ),
    Mutant(
        "doctor accumulation.equivalence: a manual window always starts at the first micro-batch",
        "src/trainwell/doctor/checks/manual_accumulation.py",
        "        start = watch.window_start(zeros[-1]) if zeros else 0",
        "        start = 0",
        (
            f"{MANUAL_T}::test_a_window_is_read_from_its_own_zero_grad_and_a_sum_over_its_items_is_a_mean",
        ),
        "optimizers taking turns are each compared over their own window",
    ),
    Mutant(
        "doctor accumulation.equivalence: a sum divided by the window's items is not a mean",
        "src/trainwell/doctor/checks/manual_accumulation.py",
        'if calls[start][0].reduction == "sum" and abs(scales[0] * items - 1) < 1e-6:',
        "if False:",
        (
            f"{MANUAL_T}::test_a_window_is_read_from_its_own_zero_grad_and_a_sum_over_its_items_is_a_mean",
        ),
        "a summed loss divided by the window's samples is the window's mean: no false fail",
    ),
    Mutant(
        "doctor data.split_distribution: a split's location is not compared",
        "src/trainwell/doctor/checks/data.py",
        "                float(shift[i]) >= a or float(factor[i]) >= b",
        "                float(factor[i]) >= b",
        (SPLIT_T,),
        "every split comes from the distribution it claims: its features' location",
    ),
    Mutant(
        "doctor data.split_distribution: a split's spread is not compared",
        "src/trainwell/doctor/checks/data.py",
        "                float(shift[i]) >= a or float(factor[i]) >= b",
        "                float(shift[i]) >= a",
        (SPLIT_T,),
        "every split comes from the distribution it claims: its features' spread",
    ),
    Mutant(
        "doctor data.split_distribution: a small split's sampling error is taken for a shift",
        "src/trainwell/doctor/checks/data.py",
        "        error = NOISE * (1 / n_s + 1 / n_t) ** 0.5",
        "        error = 0.0",
        (SPLIT_T,),
        "no warn on healthy code: a small split's mean moves by sampling alone",
    ),
    Mutant(
        "doctor data.split_distribution: a rare feature blank in a small split is judged",
        "src/trainwell/doctor/checks/data.py",
        "        judged = usable & ((std_s > 0) | (n_s / kurt >= CONSTANT_DRAWS))",
        "        judged = usable",
        (RARE_T,),
        "no fail on healthy code: few samples of a rarely set feature may hold none of its values",
    ),
    Mutant(
        "doctor data.split_distribution: a heavy-tailed feature's spread taken as exact",
        "src/trainwell/doctor/checks/data.py",
        "        spread_error = NOISE * ((kurt - 1).clamp(min=0) / 4 * (1 / n_s + 1 / n_t)).sqrt()",
        "        spread_error = 0.0",
        (RARE_T,),
        "no warn on healthy code: a spread drawn from few samples moves with the tails",
    ),
    Mutant(
        "doctor data.split_distribution: token ids are not compared",
        "src/trainwell/doctor/checks/data.py",
        "    for path, counts in s.ids.get(split, {}).items():",
        "    for path, counts in {}.items():",
        (f"{INV_T}[val_text_not_lowercased]",),
        "token inputs are compared by their id distribution",
    ),
    Mutant(
        "doctor data.batch_composition: batches of one class only warn",
        "src/trainwell/doctor/checks/order.py",
        "    if single >= SINGLE and",
        "    if single > 1.0 and",
        (
            f"{INV_T}[sorted_by_class_no_shuffle]",
            f"{INV_T}[stream_read_class_by_class]",
            f"{INV_T}[batches_drawn_per_class]",
        ),
        "a training batch looks like the training set: batches of one class fail",
    ),
    Mutant(
        "doctor data.batch_composition: shuffle=False is not named",
        "src/trainwell/doctor/checks/order.py",
        "    if isinstance(order_source(loader), SequentialSampler):",
        "    if False:",
        (NAMED_T,),
        "the verdict says which loader setting serves the set in order",
    ),
    Mutant(
        "doctor data.batch_composition: one order every epoch is not said",
        "src/trainwell/doctor/checks/order.py",
        "    repeats = first == second",
        "    repeats = False",
        (NAMED_T,),
        "an ordered set served in order: the same class order every epoch is named",
    ),
    Mutant(
        "doctor: the loader's own batch sampler is not found inside the template's wrapper",
        "src/trainwell/doctor/harness/samples.py",
        '    while getattr(source, "batches", None) is not None:',
        "    while False:",
        (NAMED_T,),
        "verdicts name the user's sampler, not the template's sharding wrapper",
    ),
    Mutant(
        "doctor grad.flow: a loss computed in float32 is compared by finite differences",
        "src/trainwell/doctor/checks/gradients.py",
        "    if loss.dtype != torch.float64:",
        "    if False:",
        (
            "tests/doctor/test_zoo.py::"
            "test_a_loss_computed_in_float32_is_not_compared_by_finite_differences",
        ),
        "no warn on healthy code: a float32 loss is too coarse for a 1e-6 difference",
    ),
    Mutant(
        "the writer of shared files: torchrun's second node and srun's tasks pass as writers",
        "src/trainwell/io/writer.py",
        '    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)',
        '    return all(os.environ.get(name, "0") == "0" for name in ("LOCAL_RANK", "NODE_RANK"))',
        ("tests/io/test_writer.py::test_exactly_the_launchs_rank_zero_writes",),
        "one process writes a run's shared files under every launcher",
    ),
    Mutant(
        "launcher=local: every trial gets the first GPU group",
        "src/hydra_plugins/trainwell_local_launcher/_slots.py",
        "    return [Slot(groups[k % len(groups)] if groups else (), threads) for k in range(count)]",
        "    return [Slot(groups[0] if groups else (), threads) for k in range(count)]",
        (
            "tests/training/test_local_launcher.py::"
            "test_slots_share_the_gpus_in_groups_and_the_cpus_equally",
        ),
        "trials packed on one machine each run on their own GPUs",
    ),
    Mutant(
        "launcher=local: every trial takes every core",
        "src/hydra_plugins/trainwell_local_launcher/_slots.py",
        "    threads = max(cpus // count, 1)",
        "    threads = cpus",
        (
            "tests/training/test_local_launcher.py::"
            "test_slots_share_the_gpus_in_groups_and_the_cpus_equally",
        ),
        "trials packed on one machine share its CPU threads",
    ),
]

BEST_T = "tests/training/test_best_epoch_results.py"
CV_VALUES_T = "tests/training/test_cross_validation_values.py"
MUTANTS += [
    Mutant(
        "results: val/* are the last epoch's, not the best checkpoint's",
        "src/trainwell/training/run.py",
        '    return {**fit_metrics, **best["metrics"]}, where, metrics_last',
        "    return fit_metrics, where, metrics_last",
        (BEST_T,),
        "results.json's val/* are the values of the epoch best.ckpt holds",
    ),
    Mutant(
        "results: the validation history is not in the checkpoints",
        "src/trainwell/callbacks/validation_history.py",
        '        return {"entries": [dict(e, metrics=dict(e["metrics"])) for e in self.entries]}',
        '        return {"entries": []}',
        (BEST_T,),
        "a resumed run reports the same best epoch as the uninterrupted one",
    ),
    Mutant(
        "cv: float targets stratify the folds as classes",
        "src/trainwell/training/cv/folds.py",
        "    if labels.ndim != 1 or np.issubdtype(labels.dtype, np.floating):",
        "    if labels.ndim != 1:",
        (CV_VALUES_T,),
        "a regression's folds are plain shuffled ones, not stratified by every distinct value",
    ),
    Mutant(
        "cv: out-of-fold rows ignore the module's predict_step",
        "src/trainwell/training/cv/oof.py",
        "            out = module.predict_step(batch, i) if own else module(batch[0])",
        "            out = module(batch[0])",
        (CV_VALUES_T,),
        "out-of-fold predictions are what predict_step returns",
    ),
    Mutant(
        "cv: float targets written as class ids",
        "src/trainwell/io/kind_rows.py",
        "            row += [_number(v) for v in truth[i]]",
        "            row += [str(int(v)) for v in truth[i]]",
        (CV_VALUES_T,),
        "out-of-fold rows hold the target as the data gives it",
    ),
    Mutant(
        "cv: the top-level results.json does not say which weights it used",
        "src/trainwell/training/cv/run.py",
        '        "weights": cv_weights(weights),\n',
        "",
        (CV_VALUES_T,),
        "with EMA, a cross-validation's results.json says the folds used the average",
    ),
    Mutant(
        "doctor: a regression is asked for classes",
        "src/trainwell/doctor/harness/observe.py",
        "    if call is None or call.name not in VALUE_LOSSES or not call.target.is_floating_point():",
        "    if True:",
        ("tests/doctor/test_values_task.py::test_checks_that_need_classes_skip_with_the_reason",),
        "checks that need classes skip on a task of values, saying why",
    ),
]

SCHEMAS = "src/trainwell/schemas.py"
SCHEMAS_T = "tests/test_schemas.py"
MUTANTS += [
    Mutant(
        "schemas: unknown keys pass every schema",
        SCHEMAS,
        '    branch["additionalProperties"] = sig is None or sig.open\n',
        '    branch["additionalProperties"] = True\n',
        (
            f"{SCHEMAS_T}::test_a_misspelt_keyword_of_an_optimizer_fails_its_groups_schema",
            f"{SCHEMAS_T}::test_unknown_keys_are_flagged_only_where_the_signature_shows_all",
        ),
        "a misspelt keyword in a config is underlined in the editor",
    ),
    Mutant(
        "schemas: an open **kwargs signature refuses unknown keys",
        SCHEMAS,
        '    branch["additionalProperties"] = sig is None or sig.open\n',
        '    branch["additionalProperties"] = sig is None\n',
        (f"{SCHEMAS_T}::test_unknown_keys_are_flagged_only_where_the_signature_shows_all",),
        "a key an open signature may take is never underlined",
    ),
    Mutant(
        "schemas: an interpolation is not allowed where a typed value is expected",
        SCHEMAS,
        '    return {"anyOf": [*arms, _INTERPOLATION]}\n',
        '    return {"anyOf": arms}\n',
        (
            f"{SCHEMAS_T}::test_every_shipped_config_passes_its_groups_schema",
            f"{SCHEMAS_T}::test_unknown_keys_are_flagged_only_where_the_signature_shows_all",
        ),
        "every shipped config passes its group's schema, interpolations included",
    ),
    Mutant(
        "schemas: the defaults a class forwards to its base are not shown",
        KEYWORDS,
        "    defaults += tuple((name, value) for name, value in base.defaults if name not in mine)\n",
        "",
        (f"{SCHEMAS_T}::test_unknown_keys_are_flagged_only_where_the_signature_shows_all",),
        "a keyword's default shows in the editor, a base's included",
    ),
    Mutant(
        "schemas: a keyword's type is not checked",
        SCHEMAS,
        '    arms: list[dict[str, Any]] = [{"type": sorted(kinds)}]\n',
        "    arms: list[dict[str, Any]] = []\n",
        (f"{SCHEMAS_T}::test_unknown_keys_are_flagged_only_where_the_signature_shows_all",),
        "a value of the wrong simple type is underlined",
    ),
    Mutant(
        "schemas: a new class no config names yet is underlined",
        SCHEMAS,
        '        "properties": {"_target_": {"not": {"enum": sorted(known)}}},\n',
        '        "properties": {"_target_": {"enum": sorted(known)}},\n',
        (f"{SCHEMAS_T}::test_unknown_keys_are_flagged_only_where_the_signature_shows_all",),
        "a node naming a class the schemas have not seen is left open",
    ),
]

CKPT_COMPAT = "src/trainwell/compat/checkpoints.py"
DIABETES = "src/project/data/diabetes.py"
MUTANTS += [
    Mutant(
        "ema: validation swaps in an average no update has touched",
        EMA,
        "        if average is not None and average.count and trainer.state.fn == TrainerFn.FITTING:",
        "        if average is not None and trainer.state.fn == TrainerFn.FITTING:",
        (f"{EMA_T}::test_an_average_never_updated_validates_tests_and_ships_the_trained_weights",),
        "before the average's first update, validation, best.ckpt and what ships are the trained "
        "weights, never the fit-start copy",
    ),
    Mutant(
        "resume elsewhere: a best checkpoint's records are not carried to the new dir",
        CKPT_COMPAT,
        "    if old is None or new is None or Path(old) == Path(new):\n        return None\n",
        "    return None\n",
        (f"{RESUME_T}::test_a_run_continued_in_another_dir_keeps_its_best",),
        "a run moved or resumed into another dir keeps its best score and best.ckpt",
    ),
    Mutant(
        "resume elsewhere: a best.ckpt its run replaced later is carried as the recorded best",
        STATE,
        '    if int(written.get("global_step", -1)) > step:\n        return False\n',
        "",
        (f"{RESUME_T}::test_a_best_that_cannot_be_found_is_said_and_restarts",),
        "only the best file a checkpoint records is carried, never a later one of the same name",
    ),
    Mutant(
        "regression example: a fold keeps the statistics of the split it replaced",
        DIABETES,
        "        self.target_mean = self.target_std = None\n",
        "",
        (
            "src/project/tests/data/test_diabetes.py::"
            "test_a_fold_fits_the_target_statistics_on_its_own_training_samples_only",
        ),
        "each fold's target statistics are fitted on its own training samples",
    ),
]
