"""The plan inside `fit`: computed after prepare_data/setup, printed, handed to the optimizer.

`TrainingPlanner` reads the train loader each rank will really iterate, prints the plan
before the first step, fills the scaled LR and the plan's total optimizer steps into the
configured optimizer / scheduler `_partial_`s (`PlannedFactory`), and refuses a resume that
would silently change the batch arithmetic.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import replace
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import DictConfig, OmegaConf
from torch import nn

from trainwell.blocks.layers import BATCH_NORMS
from trainwell.blocks.schedules import warmup_steps_for
from trainwell.callbacks.accumulation import counting_unit
from trainwell.errors import TrainwellError
from trainwell.io.announce import announce
from trainwell.training.lr_scaling import scale_lr
from trainwell.training.plan import TrainingPlan, describe_loader, make_plan


def plan_for(
    loader: Any,
    trainer: L.Trainer,
    module: L.LightningModule | None = None,
    lr_scaling: dict[str, Any] | None = None,
    base_lr: float | None = None,
    scheduler: dict[str, Any] | None = None,
) -> TrainingPlan:
    """The plan for `loader` (the rank's train loader) under `trainer`'s settings."""
    seen = describe_loader(loader)
    world = int(trainer.world_size)
    global_batches = seen.get("global_batches")
    if global_batches is None and seen.get("rank_batches") is not None:
        global_batches = seen["rank_batches"] * world
    plan = make_plan(
        dataset_size=seen["dataset_size"],
        micro_batch=seen["micro_batch"],
        accumulate=int(trainer.accumulate_grad_batches),
        world_size=world,
        max_epochs=trainer.max_epochs,
        max_steps=trainer.max_steps,
        drop_last=seen["drop_last"],
        limit_batches=trainer.overfit_batches or trainer.limit_train_batches,
        global_batches=global_batches if seen["dataset_size"] is None else None,
        item_unit="samples" if module is None else counting_unit(module),
        unknown=seen["unknown"],
    )
    plan = replace(plan, with_replacement=seen["with_replacement"])
    if base_lr is not None:
        scaling = lr_scaling or {}
        rule = str(scaling.get("rule", "none"))
        effective = plan.effective_batch
        if effective is None and rule != "none":
            raise TrainwellError(
                f"lr_scaling.rule={rule} needs the effective batch, but the train loader's batch "
                "size is unknown; set lr_scaling.rule=none and choose the LR yourself"
            )
        reference = int(scaling.get("reference_batch", effective or 1))
        lr = scale_lr(float(base_lr), rule, effective or reference, reference)
        plan = replace(plan, lr_rule=rule, reference_batch=reference, base_lr=base_lr, lr=lr)
    if scheduler and plan.total_optimizer_steps is not None:
        warmup = warmup_steps_for(
            plan.total_optimizer_steps,
            scheduler.get("warmup_fraction", 0.0) or 0.0,
            scheduler.get("warmup_steps"),
        )
        plan = replace(plan, warmup_steps=warmup)
    return plan


def planner_settings(cfg: DictConfig) -> dict[str, Any]:
    """The run config's `lr_scaling`, the configured optimizer's lr and the scheduler: the
    keywords `plan_for` and `TrainingPlanner` take. A scaling rule without an lr to scale is
    refused: the run would otherwise train at an LR nobody chose for its batch."""
    optimizer = cfg.model.get("optimizer")
    base_lr = optimizer.get("lr") if OmegaConf.is_dict(optimizer) else None
    scaling = OmegaConf.to_container(cfg.get("lr_scaling") or {}, resolve=True)
    if str((scaling or {}).get("rule", "none")) != "none" and base_lr is None:  # type: ignore[union-attr]
        raise TrainwellError(
            f"lr_scaling.rule={scaling['rule']} scales model.optimizer.lr, but this model config "  # type: ignore[index]
            "has no optimizer `_partial_` with an lr; set lr_scaling.rule=none"
        )
    scheduler = cfg.model.get("scheduler")
    return {
        "lr_scaling": scaling,
        "base_lr": base_lr,
        "scheduler": OmegaConf.to_container(scheduler, resolve=True) if scheduler else None,
    }


# The template's nets take their normalisation as `norm` (batch | group | frozen).
NORM_KEY = "model.net.norm"


def batchnorm_warning(
    module: nn.Module,
    micro_batch: int | None,
    accumulate: int,
    world_size: int,
    sync: bool,
    norm_switch: bool = False,
) -> str | None:
    """A warning when BatchNorm normalises over fewer samples than the optimizer step averages.

    Accumulation makes the gradient exact, but BN's batch statistics (and its running averages)
    still come from one micro-batch (times the world size with SyncBatchNorm): with K>1 they are
    noisier than the effective batch suggests. `frozen` BN and GroupNorm are unaffected.
    `norm_switch`: the run's config has NORM_KEY, so the override is the fix to name; another
    net would refuse it as an unknown key.
    """
    if accumulate <= 1 or micro_batch is None:
        return None
    has_bn = any(
        isinstance(m, BATCH_NORMS) and m.training and m.track_running_stats
        for m in module.modules()
    )
    if not has_bn:
        return None
    seen = micro_batch * (world_size if sync else 1)
    effective = micro_batch * accumulate * world_size
    fix = f"{NORM_KEY}=group" if norm_switch else "GroupNorm or LayerNorm in the net"
    return (
        f"BatchNorm normalises over {seen} samples, not {effective} (micro-batch {micro_batch} x "
        f"accumulate {accumulate} x world {world_size}); consider {fix} or a larger micro-batch"
    )


def check_batch(
    saved: dict[str, Any] | None, current: dict[str, Any], allow_change: bool, path: str
) -> None:
    """A changed effective batch silently changes the run: the LR (tuned for the old batch), the
    steps per epoch and the schedule length no longer match what the checkpoint was part of."""
    if not saved or saved.get("effective_batch") == current["effective_batch"]:
        return
    old = "x".join(str(saved.get(k)) for k in ("micro_batch", "accumulate", "world_size"))
    new = "x".join(str(current[k]) for k in ("micro_batch", "accumulate", "world_size"))
    message = (
        f"the effective batch changed on resume: {saved['effective_batch']} ({old}, micro x "
        f"accumulate x world) when {path} was saved, {current['effective_batch']} ({new}) now, "
        "so the learning rate and the schedule no longer fit"
    )
    if not allow_change:
        raise TrainwellError(
            f"{message}; restore data.batch_size / trainer.accumulate_grad_batches / "
            "trainer.devices, or pass resume_allow_batch_change=true to continue anyway"
        )
    warnings.warn(message + " (continuing: resume_allow_batch_change=true)", stacklevel=2)


class TrainingPlanner(L.Callback):
    """Always installed by `training.run`: see the module docstring."""

    def __init__(
        self,
        lr_scaling: dict[str, Any] | None = None,
        base_lr: float | None = None,
        scheduler: dict[str, Any] | None = None,
        sync_batchnorm: bool = False,
        allow_batch_change: bool = False,
        ckpt_path: str | None = None,
        norm_switch: bool = False,
    ) -> None:
        self.lr_scaling = dict(lr_scaling or {})
        self.base_lr = base_lr
        self.scheduler = dict(scheduler or {})
        self.sync_batchnorm = sync_batchnorm
        self.allow_batch_change = allow_batch_change
        self.ckpt_path = ckpt_path or "the checkpoint"
        self.norm_switch = norm_switch
        self.plan: TrainingPlan | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or trainer.datamodule is None:
            return
        loader = trainer.datamodule.train_dataloader()
        self.plan = plan_for(
            loader, trainer, pl_module, self.lr_scaling, self.base_lr, self.scheduler
        )
        announce("training plan:\n  " + "\n  ".join(self.plan.lines()))
        warning = batchnorm_warning(
            pl_module,
            self.plan.micro_batch,
            self.plan.accumulate,
            self.plan.world_size,
            self.sync_batchnorm,
            self.norm_switch,
        )
        if warning:
            rank_zero_warn(warning)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        plan = self.plan
        if plan is None or plan.lr is None or plan.lr_rule == "none" or not trainer.optimizers:
            return
        group = trainer.optimizers[0].param_groups[0]
        used = float(group.get("initial_lr", group["lr"]))
        if abs(used - plan.lr) > 1e-12 * max(1.0, plan.lr):
            raise TrainwellError(
                f"lr_scaling.rule={plan.lr_rule} planned lr {plan.lr:g}, but "
                f"{type(pl_module).__name__}.configure_optimizers built its optimizer with lr "
                f"{used:g}; build it from the model.optimizer `_partial_` the template hands in, "
                "or set lr_scaling.rule=none"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"batch": self.plan.batch if self.plan is not None else None}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.plan is not None:
            check_batch(
                state_dict.get("batch"), self.plan.batch, self.allow_batch_change, self.ckpt_path
            )


class PlannedFactory:
    """A Hydra `_partial_` (optimizer or scheduler) one of whose keywords the plan fills in.

    `PlannedFactory(optimizer, plan, "lr", "lr")`: the optimizer is built with the scaled LR.
    `PlannedFactory(scheduler, plan, "total_steps", "total_optimizer_steps")`: the schedule lasts
    the plan's optimizer steps. Outside a planned fit (eval, a probe) the factory runs unchanged.
    """

    def __init__(self, factory: Any, source: TrainingPlanner, keyword: str, attribute: str) -> None:
        self.factory, self.source = factory, source
        self.__wrapped__ = factory  # what a checkpoint's hparams record (io/hparams.py)
        self.keyword, self.attribute = keyword, attribute
        try:
            parameters = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            parameters = {}
        self.accepts = keyword in parameters or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plan = self.source.plan
        value = getattr(plan, self.attribute) if plan is not None else None
        if value is not None and self.accepts:
            given = kwargs.get(self.keyword)
            if given is not None and self.keyword == "total_steps" and int(given) != value:
                rank_zero_warn(
                    f"the training plan counts {value} optimizer steps, Lightning estimates "
                    f"{given}; the schedule follows the plan"
                )
            kwargs[self.keyword] = value
        return self.factory(*args, **kwargs)


def planned_factories(model_cfg: DictConfig, plan: TrainingPlanner) -> dict[str, Any]:
    """The configured optimizer / scheduler `_partial_`s, wrapped so the plan fills in the scaled
    LR and the total optimizer steps. Modules that build their own optimizer get nothing here."""
    out: dict[str, Any] = {}
    for key, keyword, attribute in (
        ("optimizer", "lr", "lr"),
        ("scheduler", "total_steps", "total_optimizer_steps"),
    ):
        node = model_cfg.get(key)
        if node is not None and OmegaConf.is_dict(node) and node.get("_partial_"):
            out[key] = PlannedFactory(instantiate(node), plan, keyword, attribute)
    return out
