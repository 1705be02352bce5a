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
from tests.helpers.scripts import call_script, run_script
from trainwell.keywords import keyword_problem
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
        ("shop54.lazy.Anything", "shop54.lazy has no 'Anything'"),  # Python's own answer
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
    # a target found in the source imports nothing; a refusal is Python's (its import failed)
    imported = {m for m in set(sys.modules) - before if m.startswith(("shop54", "torch"))}
    assert not imported or problem is not None


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
    the owned modules, and the engine's other groups: each target located, each keyword taken."""
    experiments = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    debug = sorted(p.stem for p in (CONF / "debug").glob("[!_]*.yaml"))
    for overrides in (
        [],
        *([f"experiment={name}"] for name in experiments),
        *([f"debug={name}"] for name in debug),
        ["logger=many"],
        ["trainer=ddp_sim"],
        [*OWNED],
    ):
        cfg = cfg_factory(overrides)
        assert targets_problem(cfg) is None, overrides
        assert keyword_problem(cfg) is None, overrides


def _typo_conf(tmp_path: Path) -> str:
    conf = tmp_path / "conf" / "data"
    conf.mkdir(parents=True)
    (conf / "typo.yaml").write_text(
        "defaults:\n  - owned\n  - _self_\n_target_: tests.owned.data.OwnedDigit\n"
    )
    return f"hydra.searchpath=[file://{tmp_path / 'conf'},file://{TEST_CONF}]"


@pytest.mark.parametrize("where", ["command line", "config file"])
def test_a_mistyped_target_is_one_line_and_writes_nothing(where: str, tmp_path: Path) -> None:
    if where == "command line":
        overrides = [*OWNED, "data._target_=tests.owned.data.OwnedDigit"]
    else:
        overrides = [_typo_conf(tmp_path), "data=typo", "model=owned"]
    run_dir = tmp_path / "run"
    proc = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        "error: data._target_=tests.owned.data.OwnedDigit: tests.owned.data has no "
        "'OwnedDigit'; did you mean tests.owned.data.OwnedDigits?"
    ]
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
                    def __init__(self, **options):  # takes the config's keywords
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


# Targets Python resolves in ways a source reading does not show: (files under sys.path, target).
# A folder without __init__.py is a namespace package; the rest bind names at run time.
_RESOLVED_BY_PYTHON: dict[str, tuple[dict[str, str], str]] = {
    "folder without __init__": (
        {"own67/__init__.py": "", "own67/extra/cnn.py": "class CNN:\n    pass\n"},
        "own67.extra.cnn.CNN",
    ),
    "module importing from such a folder": (
        {
            "use67/__init__.py": "",
            "use67/extra/cnn.py": "class CNN:\n    pass\n",
            "use67/net.py": "from use67.extra.cnn import CNN\n\nclass Net(CNN):\n    pass\n",
        },
        "use67.net.Net",
    ),
    "two levels into an installed namespace": (
        {"deep67/inner/mod.py": "class Thing:\n    pass\n"},
        "deep67.inner.mod.Thing",
    ),
    "__getattr__ bound by a call": (
        {
            "lazy67.py": """
                def _make():
                    def find(name):
                        if name == "Lazy":
                            return int
                        raise AttributeError(name)
                    return find

                __getattr__ = _make()
            """
        },
        "lazy67.Lazy",
    ),
    "module replacing itself in sys.modules": (
        {
            "swap67.py": """
                import sys

                class _Face:
                    Swapped = int

                sys.modules[__name__] = _Face()
            """
        },
        "swap67.Swapped",
    ),
    "exec": ({"exec67.py": 'exec("class Made:\\n    pass")\n'}, "exec67.Made"),
    "global in a function": (
        {"glob67.py": "def _bind():\n    global Made\n    Made = int\n\n_bind()\n"},
        "glob67.Made",
    ),
    "vars()[name] =": ({"vars67.py": 'vars()["Dyn"] = int\n'}, "vars67.Dyn"),
    "match": (
        {"match67.py": "match 1:\n    case 1:\n        Matched = int\n"},
        "match67.Matched",
    ),
    "walrus": ({"walrus67.py": "if (Walrus := int):\n    pass\n"}, "walrus67.Walrus"),
    "except*": (
        {
            "star67.py": """
                try:
                    raise ExceptionGroup("g", [ValueError()])
                except* ValueError:
                    Caught = int
            """
        },
        "star67.Caught",
    ),
    "underscore name in __all__ through a star import": (
        {
            "under67/__init__.py": "from under67.impl import *\n",
            "under67/impl.py": '__all__ = ["_Hidden"]\n\nclass _Hidden:\n    pass\n',
        },
        "under67._Hidden",
    ),
    "class shadowing its submodule": (
        {
            "shade67/__init__.py": "from shade67.Widget import Widget\n",
            "shade67/Widget.py": "class Widget:\n    @classmethod\n    def create(cls):\n"
            "        return cls()\n",
        },
        "shade67.Widget.create",
    ),
    "pkgutil namespace over two folders": (
        {
            "a/split67/__init__.py": "__path__ = __import__('pkgutil').extend_path(__path__, "
            "__name__)\n",
            "b/split67/__init__.py": "__path__ = __import__('pkgutil').extend_path(__path__, "
            "__name__)\n",
            "b/split67/two.py": "class Two:\n    pass\n",
        },
        "split67.two.Two",
    ),
    "optional import under contextlib.suppress": (
        {
            "opt67/__init__.py": "",
            "opt67/mod.py": """
                import contextlib

                with contextlib.suppress(ImportError):
                    import optional_dep_67

                class Model:
                    pass
            """,
        },
        "opt67.mod.Model",
    ),
    "lazy module of an installed library": ({}, "pygments.lexers.PythonLexer"),
}


@pytest.mark.parametrize("case", sorted(_RESOLVED_BY_PYTHON))
def test_a_target_python_resolves_is_never_refused(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading may say "found"; only a failing import says "not found" or "does not import"."""
    import sys

    files, target = _RESOLVED_BY_PYTHON[case]
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for folder in ("b", "a", ""):  # a pkgutil namespace: both folders on the path
        if folder == "" or (tmp_path / folder).is_dir():
            monkeypatch.syspath_prepend(str(tmp_path / folder))
    monkeypatch.chdir(tmp_path)  # the cloner's room: code outside the installed packages
    top = target.split(".")[0]
    try:
        assert target_problem(target) is None
        assert import_chain_problem(target) is None
        assert targets_problem({"model": {"_target_": target}}) is None
    finally:
        for name in [m for m in sys.modules if m == top or m.startswith(f"{top}.")]:
            if top != "pygments":
                del sys.modules[name]


def test_a_failing_reading_lets_the_run_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error inside the checker is the checker's: the start goes on as if unchecked."""
    import trainwell.targets as targets

    def broken(target: str) -> str | None:
        raise KeyError(target)

    monkeypatch.setattr(targets, "_target_problem", broken)
    assert targets_problem({"data": {"_target_": "no_such_module_67.Data"}}) is None


def test_a_folder_without_init_is_found_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cloner's folder without __init__.py (a namespace package) is read like any other: the
    fast path finds its modules and imports nothing."""
    import sys

    from trainwell.targets import find_spec, forget

    _package(tmp_path, "own68", {"extra/cnn.py": "class CNN:\n    pass\n"})
    (tmp_path / "own68" / "extra" / "__init__.py").unlink(missing_ok=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget()
    spec = find_spec("own68.extra.cnn")
    assert spec is not None and spec.origin == str(tmp_path / "own68" / "extra" / "cnn.py")
    assert target_problem("own68.extra.cnn.CNN") is None
    assert "own68" not in sys.modules
