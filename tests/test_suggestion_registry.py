"""Every message that suggests an override or a command has a test that runs the suggestion on
the case the message names (tests/test_suggested_fixes.py and tests beside the code's own).

SUGGESTIONS is the inventory: for each suggestion, the file whose message makes it, the words
that make it (as they stand in the message's source, `{…}` for a formatted value) and the test
that produces the message, applies the fix as worded and checks that the command then does what
was asked. The guard reads every message in the engine (src/trainwell, src/hydra_plugins,
scripts): each override (`key=value`) or command (`python ...`, `scripts/<x>.py`, `make
<target>`, `git <verb>`) in one must lie inside a registered suggestion, or inside a NOT_SUGGESTED
entry that says why it suggests nothing (a label such as `resume=auto: skipping ...`, a value
the user gave, echoed back). A new suggesting message therefore fails here until it has its test.

Edits a message suggests in words ("give it a `num_classes = <n>` class attribute") are not
recognisable by their form; those with tests are listed too, for the inventory, and the guard
keeps their words and tests from going stale.

The doctor's check messages (src/trainwell/doctor/checks/) are left to the doctor's own tests:
their wording is the doctor's, kept under its museum and zoo tests.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.config import REPO

pytestmark = pytest.mark.engine

SCANNED = ("src/trainwell", "src/hydra_plugins", "scripts")
NOT_SCANNED = ("src/trainwell/doctor/checks",)


@dataclass(frozen=True)
class Suggests:
    path: str  # the file holding the message, from the repository root
    says: str  # the words of the suggestion in the message's source text
    test: str  # the test that runs it: "tests/<file>.py::<test function>"


@dataclass(frozen=True)
class NotSuggested:
    path: str
    says: str
    why: str


FIXES = "tests/test_suggested_fixes.py"
STEP0 = "tests/training/test_state_at_step_zero.py"
UPGRADE = "tests/test_upgrade.py"
SUMMARY = "tests/summary/test_summary.py"
BAD = "tests/training/test_bad_input.py"
EMA = "tests/training/test_ema.py"
EMA_RANKS = "tests/training/test_ema_ranks.py"

SUGGESTIONS: tuple[Suggests, ...] = (
    # -- the command line and the run dir ------------------------------------------------------
    Suggests(
        "src/trainwell/io/named_paths.py",
        "use resume=auto",
        f"{FIXES}::test_an_unknown_resume_mode_runs_as_resume_auto",
    ),
    Suggests(
        "src/trainwell/io/named_paths.py",
        "pass ckpt_path=<an existing .ckpt>, or resume=auto in its place",
        f"{FIXES}::test_a_checkpoint_path_that_does_not_exist_gives_way_to_resume_auto",
    ),
    Suggests(
        "src/trainwell/io/run_dir.py",
        "continue it with resume=auto",
        f"{FIXES}::test_a_run_dir_given_by_hydra_run_dir_is_continued_or_left_as_the_refusal_says",
    ),
    Suggests(
        "src/trainwell/io/run_dir.py",
        "run_id=<new name>",
        f"{FIXES}::test_a_run_dir_named_by_run_id_is_left_for_a_new_run_id",
    ),
    Suggests(
        "src/trainwell/io/run_lock.py",
        "then resume=auto continues it",
        f"{FIXES}::test_a_run_dir_in_use_is_left_for_a_new_one_or_continued_once_its_run_ended",
    ),
    # -- reading checkpoints -------------------------------------------------------------------
    Suggests(
        "src/trainwell/io/checkpoint_read.py",
        "pass an earlier checkpoint with ckpt_path=<file>",
        f"{FIXES}::test_an_unreadable_checkpoint_gives_way_to_an_earlier_one_or_resume_auto",
    ),
    Suggests(
        "src/trainwell/training/resume.py",
        "or resume=auto in place of ckpt_path=",
        f"{FIXES}::test_an_unreadable_checkpoint_gives_way_to_an_earlier_one_or_resume_auto",
    ),
    Suggests(
        "src/trainwell/io/checkpoint_read.py",
        "python -m trainwell.io.hparams {path} <new.ckpt>",
        f"{STEP0}::test_a_refused_checkpoint_names_the_converter_and_the_converter_reads_back_numpy",
    ),
    Suggests(
        "src/trainwell/training/resume.py",
        "and resume=auto continues from them",
        f"{STEP0}::test_resume_auto_over_an_earlier_releases_checkpoints_continues_after_the_named_command",
    ),
    Suggests(
        "src/trainwell/io/checkpoint_read.py",
        "pass a .ckpt written by scripts/train.py",
        f"{FIXES}::test_a_checkpoint_that_is_missing_or_not_lightnings_gives_way_to_the_one_named",
    ),
    Suggests(
        "src/trainwell/io/checkpoint_read.py",
        "checkpoint not found: {…}; pass ckpt_path=<an existing .ckpt>",
        f"{FIXES}::test_a_checkpoint_that_is_missing_or_not_lightnings_gives_way_to_the_one_named",
    ),
    Suggests(
        "src/trainwell/io/named_paths.py",
        "pass ckpt_path=<path to an existing .ckpt>",
        f"{FIXES}::test_a_checkpoint_that_is_missing_or_not_lightnings_gives_way_to_the_one_named",
    ),
    Suggests(
        "src/trainwell/io/named_paths.py",
        "pass ckpt_path=<run dir>/checkpoints/best.ckpt",
        f"{FIXES}::test_a_command_without_a_checkpoint_runs_on_the_one_the_message_names",
    ),
    # -- training settings ---------------------------------------------------------------------
    Suggests(
        "src/trainwell/training/plan_callback.py",
        "pass resume_allow_batch_change=true",
        f"{FIXES}::test_a_changed_batch_on_resume_goes_on_when_allowed_or_restored",
    ),
    Suggests(
        "src/trainwell/training/precision.py",
        "use trainer.precision=auto",
        f"{FIXES}::test_fp16_on_cpu_runs_with_the_precision_the_refusal_names",
    ),
    Suggests(
        "src/trainwell/training/monitored_metric.py",
        "set monitor.metric=<one of those> and monitor.mode=min|max",
        f"{FIXES}::test_a_monitored_metric_the_module_does_not_log_is_replaced_or_dropped",
    ),
    Suggests(
        "src/trainwell/training/monitored_metric.py",
        "monitor.metric=null callbacks.early_stopping=null",
        f"{FIXES}::test_a_monitored_metric_the_module_does_not_log_is_replaced_or_dropped",
    ),
    Suggests(
        "src/trainwell/training/plan_callback.py",
        "has no optimizer `_partial_` with an lr; set lr_scaling.rule=none",
        f"{FIXES}::test_lr_scaling_without_an_lr_to_scale_runs_unscaled_as_the_refusal_says",
    ),
    Suggests(
        "src/trainwell/training/plan_callback.py",
        "batch size is unknown; set lr_scaling.rule=none",
        f"{FIXES}::test_a_loader_of_whole_batches_runs_with_the_settings_its_messages_name",
    ),
    Suggests(
        "src/trainwell/training/plan_callback.py",
        "the template hands in, or set lr_scaling.rule=none",
        f"{FIXES}::test_an_optimizer_built_with_its_own_lr_runs_unscaled_or_from_the_partial",
    ),
    Suggests(
        "src/trainwell/training/plan_callback.py",
        "{…}=group",  # NORM_KEY=group: named only where the run's config has the switch
        f"{FIXES}::test_batchnorm_under_accumulation_names_the_switch_only_where_the_net_has_one",
    ),
    Suggests(
        "src/trainwell/loading/sharding.py",
        "callbacks.step_checkpoint=null writes no mid-epoch ones",
        f"{FIXES}::test_a_loader_of_whole_batches_runs_with_the_settings_its_messages_name",
    ),
    Suggests(
        "src/trainwell/resolvers.py",
        "give it a `num_classes = <n>` class attribute or set model.num_classes=<n>",
        f"{FIXES}::test_a_datamodule_without_a_class_count_runs_with_either_fix_the_message_names",
    ),
    Suggests(
        "src/trainwell/callbacks/train_mode.py",
        "remove the stray .eval() or list the module in callbacks.train_mode_guard.allow_eval",
        f"{FIXES}::test_a_module_left_in_eval_trains_once_listed_or_its_eval_call_removed",
    ),
    # -- predict, export, serve ----------------------------------------------------------------
    Suggests(
        "src/trainwell/deploy/outputs.py",
        "(an earlier prediction of the same data); pass overwrite=true",
        f"{FIXES}::test_a_prediction_that_exists_is_replaced_with_the_flag_the_refusal_names",
    ),
    Suggests(
        "src/trainwell/deploy/outputs.py",
        "not of this checkpoint; pass overwrite=true",
        f"{FIXES}::test_an_export_of_another_checkpoint_or_without_manifest_is_made_again_as_printed",
    ),
    Suggests(
        "src/trainwell/deploy/artifact.py",
        "export directory not found: {…}; run python scripts/export.py ckpt_path=<ckpt>",
        f"{FIXES}::test_serve_without_an_export_serves_the_one_the_printed_command_makes",
    ),
    Suggests(
        "src/trainwell/deploy/artifact.py",
        "run python scripts/export.py ckpt_path=<ckpt> first, or pass artifact=<export dir>",
        f"{FIXES}::test_serve_without_an_export_serves_the_one_the_printed_command_makes",
    ),
    Suggests(
        "src/trainwell/deploy/artifact.py",
        "pass artifact=<run dir>/export (or artifact=latest)",
        f"{FIXES}::test_serve_without_an_export_serves_the_one_the_printed_command_makes",
    ),
    Suggests(
        "src/trainwell/deploy/artifact.py",
        "export it again: python scripts/export.py ckpt_path=<ckpt> overwrite=true",
        f"{FIXES}::test_an_export_of_another_checkpoint_or_without_manifest_is_made_again_as_printed",
    ),
    Suggests(
        "src/trainwell/blocks/checkpoint_loading.py",
        "inside a run dir written by scripts/train.py (<run dir>/checkpoints/<name>.ckpt beside",
        f"{FIXES}::test_a_checkpoint_moved_out_of_its_run_dir_loads_from_where_the_message_says",
    ),
    Suggests(
        "src/trainwell/deploy/loading.py",
        "inside a run dir written by scripts/train.py (<run dir>/checkpoints/<name>.ckpt)",
        f"{FIXES}::test_a_checkpoint_moved_out_of_its_run_dir_loads_from_where_the_message_says",
    ),
    Suggests(
        "src/trainwell/resolvers.py",
        "({…}); set model.num_classes=<number of classes>",
        f"{FIXES}::test_a_datamodule_made_by_a_function_runs_with_the_class_count_the_message_names",
    ),
    # -- runs that stop: pre-emption, a full disk, a non-finite loss ---------------------------
    Suggests(
        "src/trainwell/callbacks/preemption.py",
        "continue with resume=auto",
        "tests/callbacks/test_preemption_inprocess.py::"
        "test_a_preempted_run_resumes_to_the_uninterrupted_weights_and_results",
    ),
    Suggests(
        "src/trainwell/io/checkpoint_write.py",
        "free space, or move the run dir to a larger disk and point hydra.run.dir at it; then "
        "resume=auto",
        f"{BAD}::test_disk_full_during_a_checkpoint_save",
    ),
    Suggests(
        "src/trainwell/callbacks/non_finite.py",
        "run `python scripts/doctor.py` with the same overrides",
        f"{FIXES}::test_a_non_finite_loss_is_explained_by_the_doctor_run_with_the_same_overrides",
    ),
    Suggests(
        "src/trainwell/training/fsdp.py",
        "set trainer.strategy.activation_checkpointing=false",
        f"{FIXES}::test_fsdp_runs_without_activation_checkpointing_and_counts_flops_once_declared",
    ),
    # -- the doctor (the doctor script's own overrides; its checks' wording is the doctor's) ----
    Suggests(
        "src/trainwell/doctor/run.py",
        "run with HYDRA_FULL_ERROR=1",
        f"{FIXES}::test_a_probe_that_raises_gives_its_traceback_with_the_variable_the_verdict_names",
    ),
    Suggests(
        "src/trainwell/doctor/run.py",
        "or set doctor_allow_fail=true",
        f"{FIXES}::test_a_preflight_that_fails_lets_the_run_start_with_the_flag_it_names",
    ),
    # -- searches and their summaries ----------------------------------------------------------
    Suggests(
        "src/trainwell/cli.py",
        "start it with -m (python {…} -m hparams_search={…} ...)",
        "tests/training/test_search.py::"
        "test_a_search_started_without_multirun_runs_as_the_printed_command",
    ),
    Suggests(
        "src/hydra_plugins/trainwell_optuna_sweeper/_search.py",
        "set optimized_metric=<metric name>",
        "tests/training/test_search.py::test_a_sweep_without_a_result_exits_1_naming_the_cause",
    ),
    Suggests(
        "src/trainwell/callbacks/pruning.py",
        "pruning needs optimized_metric=<the metric the search optimizes>",
        "tests/training/test_pruning.py::"
        "test_a_trial_without_its_metric_runs_with_the_optimized_metric_the_refusal_names",
    ),
    Suggests(
        "src/trainwell/summary/callback.py",
        "once that is fixed, python scripts/summarize.py {…} rebuilds it",
        f"{SUMMARY}::test_a_summary_that_cannot_be_built_warns_in_one_line_and_the_job_stands",
    ),
    Suggests(
        "src/trainwell/summary/render.py",
        "or by `python scripts/summarize.py <this dir>`",
        f"{SUMMARY}::test_a_plot_pending_on_running_jobs_is_drawn_by_the_command_summary_md_names",
    ),
    Suggests(
        "src/trainwell/summary/write.py",
        "summarize.py takes summary.pool=[...], summary.metric=<name> and summary.mode=min|max",
        f"{SUMMARY}::test_summarize_refuses_what_is_not_a_multirun_dir_in_one_line",
    ),
    Suggests(
        "scripts/summarize.py",
        "usage: python scripts/summarize.py <multirun dir> [summary.pool=[...]] "
        "[summary.metric=<name>]",
        f"{SUMMARY}::test_summarize_without_a_dir_prints_its_usage_and_runs_as_it_shows",
    ),
    Suggests(
        "scripts/cv_assemble.py",
        "usage: python scripts/cv_assemble.py <dir holding the fold jobs' run dirs>",
        "tests/training/test_cross_validation_kill.py::"
        "test_kills_inside_a_fold_then_resume_give_the_same_oof_file_and_cv_figures",
    ),
    # -- the scripts' interpreter --------------------------------------------------------------
    Suggests(
        "src/trainwell/io/checkpoint_state.py",
        "keep numpy arrays and scalars, numbers, strings, tensors and lists, tuples and dicts of "
        "them there (a fitted object's arrays, such as a scaler's mean_ and scale_, not the "
        "object)",
        f"{FIXES}::test_a_fitted_object_in_a_datamodules_state_runs_once_its_arrays_are_kept_instead",
    ),
    Suggests(
        "src/trainwell/training/evaluate.py",
        "add them to evaluate this checkpoint",
        f"{FIXES}::test_eval_of_a_module_without_test_step_runs_once_the_hook_is_added",
    ),
    Suggests(
        "scripts/_bootstrap.py",
        "then use .venv/bin/python (or `source .venv/bin/activate`)",
        f"{FIXES}::test_a_script_started_by_another_python_runs_with_the_venvs_as_the_line_says",
    ),
    # -- make upgrade ----------------------------------------------------------------------------
    Suggests(
        "scripts/upgrade.py",
        "make upgrade TEMPLATE=<git url or path> REF=<tag|branch|commit>",
        f"{UPGRADE}::test_the_engines_changes_arrive_and_the_cloners_room_stays_as_it_was",
    ),
    Suggests(
        "scripts/upgrade.py",
        "make one (git init && git add -A && git commit -m 'my project')",
        f"{UPGRADE}::test_a_directory_that_is_no_git_repository_is_told_how_to_make_one",
    ),
    Suggests(
        "scripts/upgrade.py",
        "finish it (git add the fixed files, git commit) or undo it (git merge --abort), then "
        "run make upgrade again",
        f"{UPGRADE}::test_a_file_both_sides_changed_stops_with_markers_and_nothing_of_the_cloners_is_lost",
    ),
    Suggests(
        "scripts/upgrade.py",
        "(git stash), then run make upgrade again",
        f"{UPGRADE}::test_uncommitted_changes_are_refused_in_one_line_and_nothing_changes",
    ),
    Suggests(
        "scripts/upgrade.py",
        "git config user.name 'Your Name' && git config user.email you@example.com",
        f"{UPGRADE}::test_a_git_without_the_users_name_is_told_what_to_set_before_anything_changes",
    ),
    Suggests(
        "scripts/upgrade.py",
        "`git fetch {…} <that tag> && git merge --allow-unrelated-histories -s ours -m 'Start "
        "from the template' FETCH_HEAD`, then run make upgrade again",
        f"{UPGRADE}::test_a_copied_clone_is_told_how_to_record_its_start_and_then_upgrades",
    ),
    Suggests(
        "scripts/upgrade.py",
        "(git update-ref -d refs/{…}) or rename it, then run make upgrade again",
        f"{UPGRADE}::test_a_leftover_ref_of_an_earlier_upgrade_is_deleted_as_named_and_the_upgrade_runs",
    ),
    Suggests(
        "scripts/upgrade.py",
        "git add to keep it, git rm to drop it",
        f"{UPGRADE}::test_an_engine_file_you_changed_and_the_release_deleted_is_kept_or_dropped_as_named",
    ),
    Suggests(
        "scripts/upgrade.py",
        "fix each, git add it and git commit, or git merge --abort",
        f"{UPGRADE}::test_a_file_both_sides_changed_stops_with_markers_and_nothing_of_the_cloners_is_lost",
    ),
    Suggests(
        "scripts/upgrade.py",
        "git commit to finish, or git merge --abort to return to where you were",
        f"{UPGRADE}::test_a_merge_commit_a_hook_refused_is_finished_or_undone_as_named",
    ),
    # -- exponential moving average ------------------------------------------------------------
    Suggests(
        "src/trainwell/callbacks/ema.py",
        "set trainer.strategy.save_distributed_checkpoint=false",
        f"{EMA_RANKS}::test_fsdp_with_ema_trains_once_checkpoints_are_one_file_as_the_refusal_says",
    ),
    Suggests(
        "src/trainwell/callbacks/ema.py",
        "ema.decay={…}",
        f"{EMA}::test_resuming_an_ema_checkpoint_without_ema_is_refused_and_resumes_as_the_refusal_says",
    ),
    Suggests(
        "src/trainwell/callbacks/ema.py",
        "ema.decay=<its decay>",
        f"{EMA}::test_an_ema_checkpoint_that_records_no_decay_asks_for_it_and_resumes_once_given",
    ),
)

# Suggestions no test here runs, and why.
UNTESTED: tuple[NotSuggested, ...] = (
    NotSuggested(
        "scripts/_bootstrap.py",
        "run `make train` once to set up .venv",
        "it installs the project into .venv; the suite shares one environment and must not "
        "reinstall it (the rest of the line, the venv's python, is run)",
    ),
)

NOT_SUGGESTED: tuple[NotSuggested, ...] = (
    NotSuggested(
        "src/trainwell/doctor/harness/windows.py",
        "dropout modules at p=0",
        "a doctor verdict's prose: what its probe set, not an override",
    ),
    NotSuggested(
        "src/trainwell/callbacks/ema.py",
        "ema.decay with trainer.strategy.save_distributed_checkpoint=true is not supported",
        "the setting the user gave, echoed back",
    ),
    NotSuggested(
        "src/trainwell/training/resume.py", "resume=auto: ", "a label: what resume=auto is doing"
    ),
    NotSuggested(
        "src/trainwell/training/plan_callback.py",
        "(continuing: resume_allow_batch_change=true)",
        "says the flag the user gave is why the run goes on",
    ),
    NotSuggested(
        "src/trainwell/loading/sharding.py",
        "data.sampler=weighted needs",
        "echoes the setting the user gave",
    ),
    NotSuggested(
        "src/trainwell/training/cv/run.py",
        "(fast_dev_run, or callbacks.model_checkpoint=null)",
        "names the settings that cause it",
    ),
    NotSuggested("src/trainwell/training/run.py", "skipped: test=false", "names the setting given"),
    NotSuggested(
        "src/trainwell/io/checkpoint_read.py",
        "a weights_only=True load",
        "names how checkpoints are read",
    ),
    NotSuggested(
        "src/trainwell/io/hparams.py",
        "weights_only=True",
        "the converter's own description (--help)",
    ),
    NotSuggested(
        "src/trainwell/io/hparams.py", "python -m trainwell.io.hparams", "the converter's own name"
    ),
    NotSuggested(
        "src/trainwell/io/checkpoint_read.py",
        "python -m trainwell.io.hparams {path} <new.ckpt>",
        "the command itself, used by the messages registered above",
    ),
    NotSuggested(
        "src/trainwell/loading/sharding.py", "batch_size=None", "describes the loader given"
    ),
    NotSuggested(
        "src/trainwell/doctor/harness/samples.py", "batch_size=None", "describes the loader given"
    ),
    NotSuggested("src/trainwell/callbacks/training_state.py", "python", "an RNG stream's name"),
    NotSuggested("src/trainwell/command_line.py", "provider=", "a line of Hydra's it drops"),
    NotSuggested(
        "src/hydra_plugins/trainwell_optuna_sweeper/_search.py",
        "++pruning.",
        "an override the sweeper hands its trial",
    ),
    NotSuggested("scripts/upgrade.py", "--format=%(refname:strip=3)", "an argument to git"),
    NotSuggested("scripts/upgrade.py", "git needs your name", "prose: what git needs"),
    NotSuggested("scripts/upgrade.py", "git merge stopped before", "prose: what git did"),
    NotSuggested("scripts/upgrade.py", "git is not installed", "prose: what is missing"),
    NotSuggested("scripts/upgrade.py", "root of a git repository", "prose: what it needs"),
    NotSuggested("scripts/upgrade.py", "then git init)", "prose: how the clone was made"),
    NotSuggested("scripts/upgrade.py", "but git commit failed", "prose: what git did"),
    NotSuggested("scripts/_bootstrap.py", "this python ({…})", "names the interpreter used"),
    NotSuggested(
        "src/trainwell/io/hparams.py",
        "torch.load with weights_only=False",
        "the converter's own description (--help)",
    ),
)


# -- reading the messages ------------------------------------------------------------------------

OVERRIDE = re.compile(r"(?<![\w.…/+~-])[+~]{0,2}[A-Za-z_][\w.]*=(?![{=\s])")


def _make_targets() -> str:
    phony = re.search(r"^\.PHONY:(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert phony, "Makefile lists no .PHONY targets"
    return "|".join(re.escape(t) for t in phony.group(1).split())


COMMAND = re.compile(
    rf"\bpython\b|\bscripts/\w+\.py\b|\bmake (?:{_make_targets()})\b(?!:)|\bgit [a-z][a-z-]*"
)


def _literal(node: ast.AST) -> str | None:
    """The text of a string expression, `{…}` for each formatted value; None for other code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{…}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{…}") + (right if right is not None else "{…}")
    return None


def messages(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string expression in `path` but docstrings: each outermost one
    whole (implicitly joined parts, f-strings, `+` of them)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found, inside = [], set()
    for node in ast.walk(tree):  # breadth first: an outer expression before its parts
        if id(node) in inside or id(node) in docstrings:
            continue
        text = _literal(node)
        if text is None:
            continue
        inside.update(id(sub) for sub in ast.walk(node))
        found.append((node.lineno, text))
    return found


def engine_files() -> list[Path]:
    return [
        path
        for root in SCANNED
        for path in sorted((REPO / root).rglob("*.py"))
        if not str(path.relative_to(REPO)).startswith(NOT_SCANNED)
    ]


def _entries(path: str) -> list[Suggests | NotSuggested]:
    return [e for e in (*SUGGESTIONS, *NOT_SUGGESTED, *UNTESTED) if e.path == path]


def uncovered() -> list[str]:
    """`file:line: marker in text` for each override or command no entry covers."""
    missing = []
    for path in engine_files():
        rel = str(path.relative_to(REPO))
        entries = _entries(rel)
        for line, text in messages(path):
            spans = [
                (m.start(), m.start() + len(e.says))
                for e in entries
                for m in re.finditer(re.escape(e.says), text)
            ]
            for marker in [*OVERRIDE.finditer(text), *COMMAND.finditer(text)]:
                if not any(start <= marker.start() < end for start, end in spans):
                    missing.append(f"{rel}:{line}: {marker.group(0)!r} in {text[:160]!r}")
    return missing


# -- the guard -----------------------------------------------------------------------------------


def test_every_suggested_override_or_command_in_a_message_has_its_test() -> None:
    missing = uncovered()
    assert not missing, (
        "a message suggests an override or a command that no test runs: add a test that runs it "
        "on the case the message names (tests/test_suggested_fixes.py) and register it in "
        "SUGGESTIONS, or say in NOT_SUGGESTED why it suggests nothing:\n" + "\n".join(missing)
    )


@pytest.mark.parametrize(
    "entry", [*SUGGESTIONS, *NOT_SUGGESTED, *UNTESTED], ids=lambda e: e.says[:40]
)
def test_each_entry_still_names_words_of_a_message_in_its_file(
    entry: Suggests | NotSuggested,
) -> None:
    path = REPO / entry.path
    assert path.is_file(), f"{entry.path} is gone: move or drop the entry"
    texts = [text for _, text in messages(path)]
    assert any(entry.says in text for text in texts), (
        f"no message in {entry.path} says {entry.says!r} any more: update the entry (and its "
        "test, which reads the words from the message)"
    )


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def test_each_suggestion_names_a_test_that_exists() -> None:
    gone = []
    for entry in SUGGESTIONS:
        file, _, name = entry.test.partition("::")
        path = REPO / file
        if not path.is_file() or name not in _test_functions(path):
            gone.append(f"{entry.says!r}: {entry.test}")
    assert not gone, "tests named in SUGGESTIONS that do not exist:\n" + "\n".join(gone)


def test_the_guard_sees_a_new_suggestion_and_an_echo_it_is_told_about(tmp_path: Path) -> None:
    """The reading itself: a suggestion in an f-string across lines is found, a formatted value
    after `=` (an echo of the user's setting) is not a suggestion, a docstring is not a message."""
    source = tmp_path / "example.py"
    source.write_text(
        '"""Run `python scripts/train.py seed=1`: a docstring."""\n'
        "def f(mode):\n"
        '    raise ValueError(f"resume={mode} is not a mode; "\n'
        '                     "use resume=auto")\n'
    )
    ((line, text),) = messages(source)
    assert (line, text) == (3, "resume={…} is not a mode; use resume=auto")
    assert [m.group(0) for m in OVERRIDE.finditer(text)] == ["resume="]
    assert OVERRIDE.search(text).start() == text.index("resume=auto")  # type: ignore[union-attr]
    assert COMMAND.search("run python scripts/export.py ckpt_path=<ckpt>")
    assert COMMAND.search("then run make upgrade again")
    assert not COMMAND.search("make upgrade: merged as 1234")  # a label
    assert not COMMAND.search("set_cv_fold must make val_dataloader yield")


# "docs/running.md: Cross-validation", "docs/running.md, 'Imbalanced classes'": a file and a
# section of it a message sends the reader to.
DOC_POINTER = re.compile(r"docs/([\w-]+\.md)(?::\s*([A-Z][\w -]*\w)|, '([^']+)')?")


def test_each_page_and_section_a_message_points_to_exists() -> None:
    pointed = set()
    for path in engine_files():
        for _, text in messages(path):
            for found in DOC_POINTER.finditer(text):
                pointed.add((found.group(1), found.group(2) or found.group(3)))
    assert ("running.md", "Imbalanced classes") in pointed  # the reading works
    for page, section in sorted(pointed, key=str):
        doc = REPO / "docs" / page
        assert doc.is_file(), f"a message points to docs/{page}, which does not exist"
        if section:
            headings = [line.lstrip("#").strip() for line in doc.read_text().splitlines()
                        if line.startswith("#")]  # fmt: skip
            assert section in headings, f"docs/{page} has no section {section!r}"
