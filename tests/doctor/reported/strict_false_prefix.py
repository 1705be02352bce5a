"""Pretrained weights saved from a wrapper (Lightning's `model.`, DataParallel's `module.`) and
loaded with load_state_dict(strict=False): no key matches, nothing is loaded, no error is
raised, and training starts from random weights.

Source: https://github.com/pytorch/examples/issues/1029
"""

from __future__ import annotations

import torch

from tests.doctor.reported._common import Classifier, mlp


def pretrained_checkpoint() -> dict[str, torch.Tensor]:
    """The reporter's file: the weights as a LightningModule with a `.model` attribute saves them."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(1234)
    weights = mlp().state_dict()
    torch.random.set_rng_state(generator_state)
    return {f"model.{k}": v for k, v in weights.items()}


class Buggy(Classifier):
    def __init__(self) -> None:
        super().__init__()
        self.net.load_state_dict(pretrained_checkpoint(), strict=False)


class Healthy(Classifier):
    """The fix: strip the prefix and load strictly."""

    def __init__(self) -> None:
        super().__init__()
        state = {k.removeprefix("model."): v for k, v in pretrained_checkpoint().items()}
        self.net.load_state_dict(state, strict=True)
