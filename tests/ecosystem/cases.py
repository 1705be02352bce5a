"""The ecosystem corpus: foreign LightningModules / DataModules and how train.py is pointed at them.

Each case is a module as users bring it (Lightning's own demo classes unchanged, or a pattern
from public Lightning code in tests/ecosystem/modules.py), trained with Hydra overrides only.

Lightning's other demos are left out because they cannot run offline: `LightningTransformer` and
`LightningLSTM` download WikiText-2 in their own `prepare_data`, and `MNISTDataModule` downloads
MNIST.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.helpers.config import REPO

CONF = REPO / "tests" / "ecosystem" / "conf"
MODULES = "tests.ecosystem.modules"
DATA = "tests.ecosystem.data"
BORING = "lightning.pytorch.demos.boring_classes"

# Every case: two short epochs, deterministic kernels, a step checkpoint every few optimizer
# steps (so a kill mid-epoch resumes from a mid-epoch state), no rich bar or config print.
COMMON = (
    f"hydra.searchpath=[file://{CONF}]",
    "trainer.max_epochs=2",
    "trainer.deterministic=true",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
    "print_config=false",
)


def foreign_model(target: str, **kwargs: object) -> tuple[str, ...]:
    """docs/your-project.md's "Bring your own module" overrides: replace the model node by a bare `_target_`."""
    return ("~model", f"+model._target_={target}", *(f"+model.{k}={v}" for k, v in kwargs.items()))


def foreign_data(target: str) -> tuple[str, ...]:
    return ("~data", f"+data._target_={target}")


@dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple[str, ...]
    # The metric that picks best.ckpt (None: the module logs nothing to pick by; the checkpoint
    # callback then keeps the newest epoch and early stopping is off).
    monitor: tuple[str, str] | None = ("val/acc", "max")
    has_test_step: bool = True
    # Micro-batch (0-based over the run) after which the interrupted run is SIGKILLed, and the
    # optimizer steps between step checkpoints.
    kill_after: int = 8
    checkpoint_every: int = 2
    # Doctor checks that must say `warn` for this case (and none may say `fail`).
    doctor_warns: frozenset[str] = field(default_factory=frozenset)
    # A line train.py must print to stderr for this case.
    train_stderr: str | None = None

    def train_overrides(self) -> tuple[str, ...]:
        if self.monitor is None:
            monitor = ("monitor.metric=null", "callbacks.early_stopping=null")
        else:
            monitor = (f"monitor.metric={self.monitor[0]}", f"monitor.mode={self.monitor[1]}")
        every = f"callbacks.step_checkpoint.every_n_train_steps={self.checkpoint_every}"
        return (*COMMON, *self.overrides, *monitor, every)


BLOBS = ("data=eco_blobs",)

CASES = [
    # Lightning's demo classes as they ship: 64 batches of 1 per epoch, nothing logged.
    Case(
        "boring",
        (*foreign_model(f"{BORING}.BoringModel"), *foreign_data(f"{BORING}.BoringDataModule")),
        monitor=None,
        kill_after=90,
        checkpoint_every=16,
    ),
    Case(
        "boring_manual",
        (
            *foreign_model(f"{BORING}.ManualOptimBoringModel"),
            *foreign_data(f"{BORING}.BoringDataModule"),
        ),
        monitor=None,
        kill_after=90,
        checkpoint_every=16,
    ),
    Case(
        "demo_model",
        (*foreign_model(f"{BORING}.DemoModel"), *foreign_data(f"{BORING}.BoringDataModule")),
        monitor=None,
        has_test_step=False,
        kill_after=90,
        checkpoint_every=16,
    ),
    # 1 (and 3: ReduceLROnPlateau through the config's partial, monitoring val/loss).
    Case(
        "hydra_template", ("model=eco_template", *BLOBS, f"data._target_={DATA}.TemplateStyleData")
    ),
    Case("gan", (*foreign_model(f"{MODULES}.TinyGAN"), *BLOBS), monitor=None, has_test_step=False),
    # No step checkpoints: the resume starts from the end-of-epoch-0 checkpoint, written before
    # Lightning steps ReduceLROnPlateau for that epoch.
    Case(
        "plateau",
        (*foreign_model(f"{MODULES}.PlateauClassifier"), *BLOBS),
        kill_after=10,
        checkpoint_every=1000,
    ),
    Case("steplr_epoch", (*foreign_model(f"{MODULES}.StepLRClassifier"), *BLOBS)),
    Case("onecycle_step", (*foreign_model(f"{MODULES}.OneCycleClassifier"), *BLOBS)),
    Case(
        "train_only",
        (*foreign_model(f"{MODULES}.TrainOnly"), *BLOBS),
        monitor=None,
        has_test_step=False,
    ),
    Case("step_and_epoch_logs", (*foreign_model(f"{MODULES}.StepAndEpochLogging"), *BLOBS)),
    Case("metric_collection", (*foreign_model(f"{MODULES}.CollectionClassifier"), *BLOBS)),
    Case(
        "two_val_loaders",
        (*foreign_model(f"{MODULES}.TwoValLoaders"), *BLOBS, f"data._target_={DATA}.TwoValData"),
        monitor=("val/acc/dataloader_idx_0", "max"),
    ),
    Case("predict_step", (*foreign_model(f"{MODULES}.WithPredict"), *BLOBS)),
    Case("skipped_batch", (*foreign_model(f"{MODULES}.SkipsABatch"), *BLOBS)),
    Case(
        "batchnorm_accumulate",
        (*foreign_model(f"{MODULES}.BatchNormNet"), *BLOBS, "trainer.accumulate_grad_batches=2"),
        doctor_warns=frozenset({"accumulation.equivalence"}),
        train_stderr="BatchNorm normalises over 16 samples, not 32",
    ),
    Case("containers", ("model=eco_containers", *BLOBS)),
    Case(
        "dict_batch",
        (
            *foreign_model(f"{MODULES}.DictBatchClassifier"),
            *BLOBS,
            f"data._target_={DATA}.DictBatchData",
        ),
    ),
]
BY_NAME = {case.name: case for case in CASES}
