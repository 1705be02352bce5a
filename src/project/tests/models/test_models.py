import subprocess
import sys
from typing import Any

import pytest
import torch

from project.models import DigitsCNN, ResNet18


@pytest.mark.parametrize(
    ("make", "shape"),
    [(DigitsCNN, (5, 1, 8, 8)), (lambda: ResNet18(width=8), (5, 3, 32, 32))],
    ids=["digits_cnn", "resnet18"],
)
def test_forward_returns_logits(make: Any, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)  # before the net is built: its initial weights decide the signs below
    net = make().eval()
    logits = net(torch.randn(shape))
    assert logits.shape == (5, 10)
    # Logits, not probabilities: unbounded, negative entries, rows not summing to one.
    assert (logits < 0).any()
    assert not torch.allclose(logits.sum(1), torch.ones(5), atol=1e-3)
    assert not torch.allclose(logits.exp().sum(1), torch.ones(5), atol=1e-3)


@pytest.mark.parametrize("norm", ["batch", "group", "frozen"])
def test_resnet_norm_choices(norm: str) -> None:
    net = ResNet18(width=8, norm=norm)
    out = net(torch.randn(4, 3, 32, 32))
    assert out.shape == (4, 10)
    assert net.stem[0].kernel_size == (3, 3)
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in net.modules())


def test_resnet18_has_resnet18_size() -> None:
    params = sum(p.numel() for p in ResNet18().parameters())
    assert 11_000_000 < params < 11_300_000  # CIFAR ResNet-18: 11.17M parameters


def test_unknown_norm_is_refused() -> None:
    with pytest.raises(ValueError, match=r"batch\|group\|frozen"):
        ResNet18(norm="layer")


def test_models_do_not_import_lightning() -> None:
    code = "import sys, project.models; print('lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
