"""What every probe shares (datamodule, fresh tasks, one fixed batch, short fits), built as train.py
builds them on one `probe.accelerator` device, no loggers or checkpoints, whatever the classes."""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.model_helpers import is_overridden
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader

from trainwell.doctor.harness.batches import replay_loader, size_of
from trainwell.doctor.harness.samples import TrainSamples
from trainwell.doctor.harness.settings import ProbeSettings
from trainwell.errors import TrainwellError, error_line
from trainwell.loading.sharding import install_loader_policy
from trainwell.training.builders import build_trainer, probe_callbacks
from trainwell.training.plan import TrainingPlan
from trainwell.training.plan_callback import (
    TrainingPlanner,
    plan_for,
    planned_factories,
    planner_settings,
)

T = TypeVar("T")


@dataclass
class FitResult:
    trainer: L.Trainer
    error: BaseException | None

    @property
    def error_line(self) -> str:
        return "" if self.error is None else error_line(self.error)


@dataclass
class DoctorContext:
    cfg: DictConfig
    settings: ProbeSettings
    workdir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="trainwell-doctor-"))
    )
    # probe -> (result, seconds): the one cache for probes several checks read
    _shared: dict[Callable[..., Any], tuple[Any, float]] = field(default_factory=dict, repr=False)

    def shared(self, probe: Callable[[DoctorContext], T]) -> T:
        """`probe(self)`, run once; one that raises is not kept: each reader meets the error."""
        if probe not in self._shared:
            start = time.perf_counter()
            self._shared[probe] = (probe(self), time.perf_counter() - start)
        return self._shared[probe][0]

    def seconds_of(self, probe: Callable[..., Any]) -> float | None:
        return self._shared[probe][1] if probe in self._shared else None

    @cached_property
    def probe_cfg(self) -> DictConfig:
        """The run's config with the Trainer moved to one probe device (no DDP launch, no GPU)."""
        cfg = OmegaConf.create(OmegaConf.to_container(self.cfg, resolve=False))
        with open_dict(cfg):
            cfg.trainer.update(
                accelerator=self.settings.accelerator, devices=1, num_nodes=1, strategy="auto"
            )
            if "compile" in cfg.model:
                # torch.compile changes speed, not the loop's semantics; compiling every fresh
                # probe task would cost minutes, and the spy's TorchFunctionMode needs eager ops.
                cfg.model.compile = False
            half = str(cfg.trainer.get("precision")) in ("16-mixed", "16")
            if self.settings.accelerator == "cpu" and half:
                cfg.trainer.precision = "auto"
        return cfg

    @cached_property
    def datamodule(self) -> L.LightningDataModule:
        """The configured datamodule as a 1-process run sees it (loader policy, prepare, setup)."""
        dm = instantiate(self.cfg.data)
        install_loader_policy(dm, seed=int(self.cfg.seed))
        dm.prepare_data()
        dm.setup("fit")
        return dm

    def factories(self) -> dict[str, Any]:
        """The optimizer / scheduler `_partial_`s, planned, as train.py hands them to the task."""
        source = TrainingPlanner()
        source.plan = self.plan
        return planned_factories(self.probe_cfg.model, source)

    def make_task(
        self, seed: int | None = None, state: dict[str, torch.Tensor] | None = None
    ) -> L.LightningModule:
        factories = self.factories()  # before seeding: the first call builds a task of its own
        torch.manual_seed(self.cfg.seed if seed is None else seed)
        task = instantiate(self.probe_cfg.model, **factories)
        if state is not None:
            task.load_state_dict(state)
        return task

    @cached_property
    def reference_task(self) -> L.LightningModule:
        """The task as the config builds it, never trained (shared: do not modify it)."""
        return self.make_task()

    def has_hook(self, name: str) -> bool:
        return is_overridden(name, self.reference_task)

    @cached_property
    def samples(self) -> TrainSamples:
        return TrainSamples(self.datamodule.train_dataloader())

    @cached_property
    def probe_indices(self) -> list[int] | None:
        """The probe batch's dataset indices, in the loader's order (None: cannot be indexed)."""
        if not self.samples.indexable:
            return None
        flat = (i for b in self.samples.index_batches() for i in b)
        return list(islice(flat, self.settings.batch_size))

    @cached_property
    def batch(self) -> Any:
        """The fixed probe batch, by the loader's own collate_fn (else its first real batch)."""
        if indices := self.probe_indices:
            return self.samples.collate(indices)
        if indices is None and (first := self.samples.real_batches(1)):
            return first[0]
        raise TrainwellError(f"the train loader of {type(self.datamodule).__name__} is empty")

    @property
    def batch_size(self) -> int | None:
        return size_of(self.batch)

    def fixed_loader(self, repeats: int = 1) -> DataLoader:
        return replay_loader([self.batch], repeats)

    @cached_property
    def plan(self) -> TrainingPlan:
        trainer = self.trainer(callbacks=[], max_steps=self.cfg.trainer.get("max_steps", -1))
        loader = self.datamodule.train_dataloader()
        task = instantiate(self.probe_cfg.model)  # read for its item unit only
        return plan_for(loader, trainer, task, **planner_settings(self.cfg))

    @property
    def accumulate(self) -> int:
        return int(self.cfg.trainer.get("accumulate_grad_batches") or 1)

    @property
    def world_size(self) -> int | None:
        """Ranks the configured run will have (None: decided at run time, e.g. devices=auto)."""
        trainer = self.cfg.trainer
        devices, nodes = trainer.get("devices", 1), int(trainer.get("num_nodes", 1) or 1)
        if isinstance(devices, int):
            return devices * nodes if devices > 0 else None
        if isinstance(devices, str):
            if "," in devices:  # "0,1", "2,"
                return len([d for d in devices.split(",") if d.strip()]) * nodes
            return int(devices) * nodes if devices.strip().isdigit() else None
        return len(devices) * nodes if isinstance(devices, Sequence) else None  # device ids

    def probe_data(self, train: Any = None, val: Any = None) -> ProbeData:
        return ProbeData(self.datamodule, train, val)

    def trainer(self, callbacks: list[L.Callback], **overrides: Any) -> L.Trainer:
        kwargs: dict[str, Any] = dict(
            callbacks=probe_callbacks(callbacks),
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(self.workdir),
            num_sanity_val_steps=0,
            overfit_batches=0.0,
            fast_dev_run=False,
            profiler=None,
            limit_train_batches=1.0,
            min_epochs=0,
        )
        with quiet():
            return build_trainer(self.probe_cfg, **(kwargs | overrides))

    def fit(
        self,
        task: L.LightningModule,
        train: DataLoader,
        callbacks: list[L.Callback],
        max_steps: int,
        accumulate: int = 1,
        val: DataLoader | None = None,
        val_every: int | None = None,
        max_batches: int | None = None,
        ckpt_path: Path | None = None,
        **overrides: Any,
    ) -> FitResult:
        """A short real fit, bounded whatever the task does: one pass of `train` (an epoch also ends
        a manual step waiting on a condition never met), or `max_batches` batches over epochs."""
        settings: dict[str, Any] = dict(
            callbacks=[*callbacks, *([_Bound(max_batches)] if max_batches else [])],
            max_steps=max_steps,
            max_epochs=1,
            accumulate_grad_batches=accumulate,
            limit_val_batches=1.0 if val is not None else 0,
            val_check_interval=val_every if val is not None else None,
            check_val_every_n_epoch=None if val is not None else 1,
        )
        settings |= overrides
        if max_batches is None and settings["max_epochs"] in (None, -1):
            raise ValueError("a probe fit over unlimited epochs needs max_batches")
        trainer, data = self.trainer(**settings), self.probe_data(train, val)
        try:
            with quiet():
                trainer.fit(task, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        except Exception as err:  # the failure is what the check reports
            return FitResult(trainer, err)
        return FitResult(trainer, None)


def shared_probe(probe: Callable[[DoctorContext], T]) -> Callable[[DoctorContext], T]:
    """`probe` as the checks that read it call it: run once per context (`DoctorContext.shared`)."""
    return lambda ctx: ctx.shared(probe)


class ProbeData(L.LightningDataModule):
    """The probe's loaders as the fit's datamodule, every other attribute the configured one's:
    a task whose setup reads self.trainer.datamodule (class counts, sizes) sees the run's data."""

    def __init__(self, source: L.LightningDataModule, train: Any, val: Any) -> None:
        super().__init__()
        self._probe = (source, train, val)  # a name no datamodule uses (`train` is common)

    def train_dataloader(self) -> Any:
        return self._probe[1]

    def val_dataloader(self) -> Any:
        return [] if self._probe[2] is None else self._probe[2]

    test_dataloader = val_dataloader  # a probe evaluates one split at a time

    def __getattr__(self, name: str) -> Any:  # only what the probe's own does not define
        if "_probe" not in self.__dict__:  # not yet built (copy, unpickling)
            raise AttributeError(name)
        return getattr(self._probe[0], name)


class _Bound(L.Callback):
    def __init__(self, batches: int) -> None:
        self.batches, self.seen = batches, 0

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.seen += 1
        if self.seen >= self.batches:
            trainer.should_stop = True


@contextmanager
def quiet() -> Iterator[None]:
    """Silence Lightning's info lines and warnings during probes: the report says what matters."""
    log = logging.getLogger("lightning.pytorch")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(action="ignore"):
            yield
    finally:
        log.setLevel(level)
