"""Every workaround of an upstream Lightning / torch / torchmetrics / wandb behaviour, in one
package.

Each entry names what it corrects, the upstream report and the versions seen, and has a test in
tests/test_compat.py that fails once upstream changes the behaviour (then delete the entry and
its callers). Private Lightning and torch attributes are used here and nowhere else. Callers use
`from trainwell import compat` and `compat.<name>`; the modules group the entries by what they
touch:

* loops: the training loop (accumulation divisor, resumed loader order, SIGTERM broadcast);
* checkpoints: last.ckpt, step checkpoints, FSDP2 checkpoint loading;
* logged_results: what `self.log` and torchmetrics keep privately;
* schedulers: plateau schedulers a resume would not step;
* launchers: Hydra multirun + DDP, torchrun restarts, wandb runs in sweeps;
* callback_hooks: the per-hook cost of callbacks that do not implement the hook;
* noise: Lightning's advertisement and its missing-callbacks warning where eval leaves them out
  on purpose;
* serving: LitServe's shutdown (how long requests in flight may finish);
* module_hooks: the per-step cost of Lightning's module and strategy hook dispatch and of its
  training_step signature check.
"""

from trainwell.compat.callback_hooks import skip_empty_callback_hooks
from trainwell.compat.checkpoints import (
    at_epoch_last_batch,
    hold_saves_before_validation,
    last_saved_step,
    load_model_parallel_checkpoint,
    save_unmonitored,
    saves_per_batch,
    validation_follows,
)
from trainwell.compat.csv_logs import csv_filesystem
from trainwell.compat.launchers import (
    LAUNCHER_ENV,
    TORCHRUN_FRESH_STORE,
    end_job,
    finish_wandb_run,
    launcher_env,
    pin_multirun_job_for_ddp_children,
    refuse_torchrun_restart_on_shared_store,
)
from trainwell.compat.logged_results import (
    LoggedValue,
    epoch_end_pending,
    epoch_logged_metrics,
    epoch_sums,
    exact_logged_means,
    logged_values,
    metric_states,
    restore_epoch_sums,
    restore_metric_states,
)
from trainwell.compat.loops import (
    lightning_loss_divisor,
    mul_tensors_,
    restore_train_loader_position,
    set_sampler_epoch,
    skip_per_batch_sigterm_broadcast,
)
from trainwell.compat.module_hooks import cache_training_step_signature, lean_module_hooks
from trainwell.compat.noise import callbacks_left_out_on_purpose, drop_logger_advert
from trainwell.compat.schedulers import (
    end_fit_restart,
    plateau_steps_due,
    step_plateau_schedulers,
)
from trainwell.compat.serving import set_litserve_drain_timeout

__all__ = [
    "LAUNCHER_ENV",
    "TORCHRUN_FRESH_STORE",
    "LoggedValue",
    "at_epoch_last_batch",
    "cache_training_step_signature",
    "callbacks_left_out_on_purpose",
    "csv_filesystem",
    "drop_logger_advert",
    "end_fit_restart",
    "end_job",
    "epoch_end_pending",
    "epoch_logged_metrics",
    "epoch_sums",
    "exact_logged_means",
    "finish_wandb_run",
    "hold_saves_before_validation",
    "last_saved_step",
    "launcher_env",
    "lean_module_hooks",
    "lightning_loss_divisor",
    "load_model_parallel_checkpoint",
    "logged_values",
    "metric_states",
    "mul_tensors_",
    "pin_multirun_job_for_ddp_children",
    "plateau_steps_due",
    "refuse_torchrun_restart_on_shared_store",
    "restore_epoch_sums",
    "restore_metric_states",
    "restore_train_loader_position",
    "save_unmonitored",
    "saves_per_batch",
    "set_litserve_drain_timeout",
    "set_sampler_epoch",
    "skip_empty_callback_hooks",
    "skip_per_batch_sigterm_broadcast",
    "step_plateau_schedulers",
    "validation_follows",
]
