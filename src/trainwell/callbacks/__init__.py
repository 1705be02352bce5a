"""What the template installs into every Trainer; mirrors conf/callbacks/.

Always installed (guarantees, not options): exact accumulation, training state (RNG, metric
states, loader position), pre-emption. Configured in conf/callbacks/guards.yaml and on by
default: the non-finite guard, gradient-norm logging, the train-mode guard; and in
conf/callbacks/default.yaml the throughput / MFU logger.
"""

from trainwell.callbacks.accumulation import ExactAccumulation
from trainwell.callbacks.grad_norm import GradNormMonitor
from trainwell.callbacks.learning_rate import LearningRateLogger
from trainwell.callbacks.non_finite import NonFiniteGuard, NonFiniteLossError
from trainwell.callbacks.preemption import PreemptionCallback
from trainwell.callbacks.progress_bar import RichProgressBar
from trainwell.callbacks.throughput import ThroughputLogger
from trainwell.callbacks.train_mode import TrainModeGuard
from trainwell.callbacks.training_state import TrainingStateCallback

__all__ = [
    "ExactAccumulation",
    "GradNormMonitor",
    "LearningRateLogger",
    "NonFiniteGuard",
    "NonFiniteLossError",
    "PreemptionCallback",
    "RichProgressBar",
    "ThroughputLogger",
    "TrainModeGuard",
    "TrainingStateCallback",
]
