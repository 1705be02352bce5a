"""`_target_` mistakes are answered like key mistakes: one line, exit 2, a did-you-mean over the
importable module paths and the names each module defines, read from the source before torch is
imported; on the command line and in config files. A module missing from what a target's import
runs (a deleted example that a kept file still imports) is named with the file that imports it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers.config import CONF, OWNED, TEST_CONF
from tests.helpers.scripts import HEAVY, call_script, imported_and_stderr, run_script
from trainwell.targets import import_chain_problem, target_problem, targets_problem

pytestmark = pytest.mark.engine


def _package(root: Path, name: str, files: dict[str, str]) -> Path:
    for relative, text in {"__init__.py": "", **files}.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A cloner's package, as people write them: a face that imports nothing, one that imports
    its classes, a star import, a lazy face and a class bound by assignment."""
    _package(
        tmp_path,
        "shop54",
        {
            "data/__init__.py": "",
            "data/wine.py": """
                import numpy as np

                class WineDataModule:
                    pass

                def load_wine():
                    class Inner:  # not at module level
                        pass
            """,
            "models/__init__.py": "from shop54.models.mlp import MLP\n",
            "models/mlp.py": "class MLP:\n    pass\n\nAlias = MLP\n",
            "stars.py": "from shop54.models.mlp import *\n",
            "lazy.py": "def __getattr__(name):\n    raise AttributeError(name)\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "shop54"


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("shop54.data.wine.WineDataModule", None),
        ("shop54.models.MLP", None),
        ("shop54.models.mlp.Alias", None),
        ("shop54.stars.MLP", None),
        ("shop54.lazy.Anything", None),  # a lazy face may define it: instantiate answers
        ("torch.optim.SGD", None),
        ("torch.nn.Linear", None),  # torch.nn binds its layers through `from .modules import *`
        ("builtins.dict", None),
        (
            "shop54.data.wine.WineDataModul",
            "shop54.data.wine has no 'WineDataModul'; did you mean shop54.data.wine.WineDataModule?",
        ),
        (
            "shop54.data.wines.WineDataModule",
            "shop54.data has no 'wines'; did you mean shop54.data.wine.WineDataModule?",
        ),
        (  # a face that imports nothing: the class one level down
            "shop54.data.WineDataModule",
            "shop54.data has no 'WineDataModule'; did you mean shop54.data.wine.WineDataModule?",
        ),
        ("shop54.data.wine.Inner", "shop54.data.wine has no 'Inner'"),
        ("shop54.models.MPL", "shop54.models has no 'MPL'; did you mean shop54.models.MLP?"),
        ("torch.optim.SDG", "torch.optim has no 'SDG'; did you mean torch.optim.SGD?"),
        ("torhc.optim.SGD", "no module named 'torhc'; did you mean torch.optim.SGD?"),
    ],
)
def test_a_target_is_located_from_source_with_a_did_you_mean(
    shop: str, target: str, problem: str | None
) -> None:
    import sys

    before = set(sys.modules)
    assert target_problem(target) == problem
    assert not {m for m in set(sys.modules) - before if m.startswith(("shop54", "torch"))}


def test_a_module_missing_from_the_import_chain_names_the_file_that_imports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An example deleted from a package whose face still imports it."""
    _package(
        tmp_path,
        "room54",
        {
            "tasks/__init__.py": """
                from room54.tasks.classify import Classify
                from room54.tasks.lm import LanguageModel
            """,
            "tasks/classify.py": "class Classify:\n    pass\n",
            "tasks/lm.py": """
                try:
                    import room54.optional  # guarded: the module survives without it
                except ImportError:
                    pass
                from room54.data.sequences import IGNORE

                class LanguageModel:
                    pass
            """,
            "data/__init__.py": "",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert target_problem("room54.tasks.Classify") is None
    assert import_chain_problem("room54.tasks.Classify") == (
        "room54/tasks/lm.py:6 imports room54.data.sequences, which does not exist"
    )
    (tmp_path / "room54" / "data" / "sequences.py").write_text("PAD = 0\n")
    assert import_chain_problem("room54.tasks.Classify") == (
        "room54/tasks/lm.py:6 imports IGNORE from room54.data.sequences, which has none"
    )
    (tmp_path / "room54" / "data" / "sequences.py").write_text("IGNORE = -100\n")
    assert import_chain_problem("room54.tasks.Classify") is None


@pytest.mark.example(
    "project.data.cifar10",
    "project.data.sequences",
    "project.models.resnet",
    "project.models.transformer",
    "project.tasks.language_model",
)
def test_every_target_of_the_clone_is_located(cfg_factory) -> None:
    """The default run, every experiment the clone has (a deleted example takes its own with it),
    the owned modules, and the engine's other groups."""
    experiments = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    for overrides in (
        [],
        *([f"experiment={name}"] for name in experiments),
        ["logger=many"],
        ["trainer=ddp_sim"],
        [*OWNED],
    ):
        assert targets_problem(cfg_factory(overrides)) is None, overrides


def _typo_conf(tmp_path: Path) -> str:
    conf = tmp_path / "conf" / "data"
    conf.mkdir(parents=True)
    (conf / "typo.yaml").write_text(
        "defaults:\n  - owned\n  - _self_\n_target_: tests.owned.data.OwnedDigit\n"
    )
    return f"hydra.searchpath=[file://{tmp_path / 'conf'},file://{TEST_CONF}]"


@pytest.mark.parametrize("where", ["command line", "config file"])
def test_a_mistyped_target_is_one_line_before_torch(where: str, tmp_path: Path) -> None:
    if where == "command line":
        overrides = [*OWNED, "data._target_=tests.owned.data.OwnedDigit"]
    else:
        overrides = [_typo_conf(tmp_path), "data=typo", "model=owned"]
    run_dir = tmp_path / "run"
    proc = run_script(
        "train.py", *overrides, f"hydra.run.dir={run_dir}", python_options=("-X", "importtime")
    )
    imported, stderr = imported_and_stderr(proc)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert stderr == [
        "error: data._target_=tests.owned.data.OwnedDigit: tests.owned.data has no "
        "'OwnedDigit'; did you mean tests.owned.data.OwnedDigits?"
    ]
    assert "hydra" in imported and not imported & HEAVY, sorted(imported & HEAVY)
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("key", "package"),
    [("model.net._target_", "late54a"), ("data._target_", "late54b")],
)
def test_a_module_missing_at_import_time_is_one_line_naming_the_importing_file(
    key: str, package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the source does not show (an import by name at run time) fails when the target is
    imported: the same one line, exit 2, not a crash with a traceback."""
    _package(
        tmp_path,
        package,
        {
            "data.py": """
                import importlib

                importlib.import_module(__name__ + "_gone")

                class Data:
                    pass
            """,
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = call_script(
        "train.py", *OWNED, f"{key}={package}.data.Data", f"hydra.run.dir={tmp_path / 'run'}"
    )
    # the datamodule's class is read first when model.num_classes defaults to it
    prefix = f"{key}={package}.data.Data: " if key == "data._target_" else ""
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: {prefix}cannot import {package}.data.Data: {tmp_path / package / 'data.py'}:4 "
        f"imports {package}.data_gone, which cannot be found (No module named "
        f"'{package}.data_gone')"
    ], proc.stderr[-3000:]
