"""Every workaround of an upstream Lightning / torch / torchmetrics / wandb behaviour, in one
package.

Each entry names what it corrects, the upstream report and the versions seen, and has a test in
tests/test_compat.py that fails once upstream changes the behaviour (then delete the entry and
its callers). Private Lightning and torch attributes are used here and nowhere else. Callers use
`from trainwell import compat` and `compat.<name>`; the modules group the entries by what they
touch:

* averaging: what Lightning's EMA callback and torch's AveragedModel do that the template's EMA
  must not (where the average lives, its update, the trained weights after fit), and the
  average it keeps instead;
* loops: the training loop (accumulation divisor, resumed loader order, SIGTERM broadcast);
* checkpoints: last.ckpt, step checkpoints, FSDP2 checkpoint loading;
* logged_results: what `self.log` and torchmetrics keep privately;
* metric_updates: torchmetrics' per-update bookkeeping on the training hot path;
* schedulers: plateau schedulers a resume would not step;
* launchers: Hydra multirun + DDP, torchrun restarts, wandb runs in sweeps;
* callback_hooks: the per-hook cost of callbacks that do not implement the hook;
* noise: Lightning's advertisement, its missing-callbacks warning where eval leaves them out
  on purpose, and its use of a torch API that torch deprecates;
* numpy_pickles: the numpy functions a weights-only load must allow to read numpy values;
* serving: LitServe's shutdown (how long requests in flight may finish);
* module_hooks: the per-step cost of Lightning's module and strategy hook dispatch and of its
  training_step signature check.
"""

import importlib
from typing import Any

# Each name's module, imported on first use: `from trainwell import compat` costs nothing, and a
# script answers a mistyped key or path without importing torch and Lightning (five seconds on
# two cores) for workarounds it never reaches.
_HOMES = {
    "AVERAGING": "averaging",
    "PlacedAverage": "averaging",
    "TRAINED": "averaging",
    "averaging_state": "averaging",
    "holds_average": "averaging",
    "holds_updated_average": "averaging",
    "load_full_state": "averaging",
    "saved_count": "averaging",
    "skip_empty_callback_hooks": "callback_hooks",
    "at_epoch_last_batch": "checkpoints",
    "carry_records_to_dirpath": "checkpoints",
    "hold_saves_before_validation": "checkpoints",
    "last_saved_step": "checkpoints",
    "load_model_parallel_checkpoint": "checkpoints",
    "save_unmonitored": "checkpoints",
    "saves_per_batch": "checkpoints",
    "validation_follows": "checkpoints",
    "csv_filesystem": "csv_logs",
    "NUMPY_REBUILDS": "numpy_pickles",
    "LAUNCHER_ENV": "launchers",
    "TORCHRUN_FRESH_STORE": "launchers",
    "end_job": "launchers",
    "finish_wandb_run": "launchers",
    "launcher_env": "launchers",
    "pin_multirun_job_for_ddp_children": "launchers",
    "refuse_torchrun_restart_on_shared_store": "launchers",
    "LoggedValue": "logged_results",
    "epoch_end_pending": "logged_results",
    "epoch_logged_metrics": "logged_results",
    "epoch_sums": "logged_results",
    "exact_logged_means": "logged_results",
    "logged_values": "logged_results",
    "metric_states": "logged_results",
    "restore_epoch_sums": "logged_results",
    "restore_metric_states": "logged_results",
    "LeanUpdate": "metric_updates",
    "lightning_loss_divisor": "loops",
    "mul_tensors_": "loops",
    "restore_train_loader_position": "loops",
    "set_sampler_epoch": "loops",
    "skip_per_batch_sigterm_broadcast": "loops",
    "cache_training_step_signature": "module_hooks",
    "lean_module_hooks": "module_hooks",
    "cache_data_hook_instances": "module_hooks",
    "callbacks_left_out_on_purpose": "noise",
    "drop_logger_advert": "noise",
    "silence_lightning_leafspec_warning": "noise",
    "end_fit_restart": "schedulers",
    "plateau_steps_due": "schedulers",
    "step_plateau_schedulers": "schedulers",
    "set_litserve_drain_timeout": "serving",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = sorted(_HOMES)
