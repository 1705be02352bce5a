"""Plain nn.Modules. No Lightning in here: a net is usable in any loop. forward returns logits."""

from project.models.digits_cnn import DigitsCNN
from project.models.resnet import ResNet18
from project.models.transformer import CausalTransformer

__all__ = ["CausalTransformer", "DigitsCNN", "ResNet18"]
