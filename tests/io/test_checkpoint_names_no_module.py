"""A checkpoint names no trainwell module: what it pickles is plain data (tensors, numbers,
strings, containers), so renaming or moving a module of the package never orphans a checkpoint
written before, and a weights-only load never needs trainwell's classes."""

from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path

import torch

from tests.helpers.config import QUIET_RUN, compose_config
from trainwell.loading.samplers import EpochShuffle
from trainwell.training.run import train


def pickled_globals(path: Path) -> set[str]:
    """Every `module.name` a torch.save'd file's pickle refers to (torch.save writes protocol 2,
    where each reference is one GLOBAL opcode)."""
    with zipfile.ZipFile(path) as archive:
        (data,) = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        pickle = archive.read(data)
    found = set()
    for opcode, arg, _ in pickletools.genops(pickle):
        assert opcode.name != "STACK_GLOBAL", "protocol 4 pickle: read its references here too"
        if opcode.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
    return found


def test_the_reader_sees_a_pickled_trainwell_object(tmp_path: Path) -> None:
    """Guards the test below: an object of the package, pickled, shows up by its module path."""
    path = tmp_path / "planted.ckpt"
    torch.save({"state_dict": {}, "sampler": EpochShuffle(10, seed=0)}, path)
    assert "trainwell.loading.samplers.EpochShuffle" in pickled_globals(path)


def test_every_checkpoint_of_a_run_names_no_trainwell_module(tmp_path: Path) -> None:
    # Weighted draws (sampler state), mid-epoch step checkpoints (loader position), a plateau
    # scheduler and an epoch-end last.ckpt: every state the loading engine and callbacks save.
    train(
        compose_config(
            [
                "data.sampler=weighted",
                "data.samples_per_epoch=256",
                "data.batch_size=64",
                "trainer.max_epochs=2",
                "callbacks.step_checkpoint.every_n_train_steps=3",
                "callbacks.step_checkpoint.save_top_k=-1",
                "test=false",
                *QUIET_RUN,
            ],
            tmp_path,
        )
    )
    paths = sorted((tmp_path / "checkpoints").glob("*.ckpt"))
    assert {p.name for p in paths} >= {"best.ckpt", "last.ckpt", "step-0000003.ckpt"}
    for path in paths:
        named = {g for g in pickled_globals(path) if g.startswith("trainwell")}
        assert not named, f"{path.name} pickles {sorted(named)}"
