import subprocess
import sys
from pathlib import Path

import pytest
import torch

from project.models.digits_cnn import DigitsCNN

pytestmark = pytest.mark.example("project.models.digits_cnn")

NETS = sorted(p.stem for p in Path(__file__).parents[2].joinpath("models").glob("[!_]*.py"))


def assert_logits(net: torch.nn.Module, shape: tuple[int, ...]) -> None:
    """A net's forward gives logits, not probabilities: unbounded, negative entries, rows not
    summing to one."""
    logits = net.eval()(torch.randn(shape))
    assert logits.shape == (shape[0], 10)
    assert (logits < 0).any()
    assert not torch.allclose(logits.sum(1), torch.ones(shape[0]), atol=1e-3)
    assert not torch.allclose(logits.exp().sum(1), torch.ones(shape[0]), atol=1e-3)


def test_forward_returns_logits() -> None:
    torch.manual_seed(0)  # before the net is built: its initial weights decide the signs
    assert_logits(DigitsCNN(), (5, 1, 8, 8))


@pytest.fixture(scope="module")
def lightning_after_each_net() -> dict[str, bool]:
    """Per net, imported in turn in one fresh interpreter: is Lightning imported by then? Once
    one net imports it, every later one reads True too (a fail, never a false pass)."""
    code = (
        "import importlib, sys\n"
        f"for name in {NETS!r}:\n"
        "    importlib.import_module(f'project.models.{name}')\n"
        "    print(name, 'lightning' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {
        name: seen == "True" for name, seen in (line.split() for line in out.stdout.splitlines())
    }


@pytest.mark.parametrize("name", NETS)
def test_nets_do_not_import_lightning(name: str, lightning_after_each_net: dict[str, bool]) -> None:
    assert lightning_after_each_net[name] is False
