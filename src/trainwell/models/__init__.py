"""Plain nn.Modules. No Lightning in here: a net is usable in any loop. forward returns logits."""

from trainwell.models.digits_cnn import DigitsCNN
from trainwell.models.resnet import ResNet18
from trainwell.models.transformer import CausalTransformer

__all__ = ["CausalTransformer", "DigitsCNN", "ResNet18"]
