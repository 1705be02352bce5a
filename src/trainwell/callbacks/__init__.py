"""What the template installs into every Trainer; mirrors conf/callbacks/.

Always installed (guarantees, not options): exact accumulation, training state (RNG, metric
states, loader position), pre-emption. Configured in conf/callbacks/guards.yaml and on by
default: the non-finite guard, gradient-norm logging, the train-mode guard; and in
conf/callbacks/default.yaml the throughput / MFU logger. Off by default, `ema.decay=0.999`
(conf/callbacks/_ema.yaml): the EMA of the weights.
"""

from trainwell.callbacks.accumulation import ExactAccumulation
from trainwell.callbacks.ema import ExactEMA
from trainwell.callbacks.grad_norm import GradNormLogger
from trainwell.callbacks.last_checkpoint import LastCheckpoint
from trainwell.callbacks.learning_rate import LearningRateLogger
from trainwell.callbacks.non_finite import NonFiniteGuard, NonFiniteLossError
from trainwell.callbacks.preemption import PreemptionCheckpoint
from trainwell.callbacks.progress_bar import ThrottledProgressBar
from trainwell.callbacks.step_checkpoint import StepCheckpoint
from trainwell.callbacks.throughput import ThroughputLogger
from trainwell.callbacks.train_mode import TrainModeGuard
from trainwell.callbacks.training_state import ExactResume

__all__ = [
    "ExactAccumulation",
    "ExactEMA",
    "ExactResume",
    "GradNormLogger",
    "LastCheckpoint",
    "LearningRateLogger",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "PreemptionCheckpoint",
    "StepCheckpoint",
    "ThrottledProgressBar",
    "ThroughputLogger",
    "TrainModeGuard",
]
