"""A misspelt keyword of a `_target_` (on the command line or in a cloner's yaml) is one line with
a did-you-mean, exit 2, before torch is imported, read from the signature's source; a signature
the source does not fully show is never refused there, and its instantiate error gets the same
line. A multirun checks every job before the first starts."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.helpers.config import CONF, OWNED, TEST_CONF, with_baseline
from tests.helpers.scripts import HEAVY, call_script, imported_and_stderr, run_script
from trainwell.command_line import check_command_line, sweep_jobs
from trainwell.keywords import keyword_problem, unexpected_keyword_line
from trainwell.targets import forget

pytestmark = pytest.mark.engine

_SOURCE = """
import functools
from dataclasses import dataclass


class Plain:
    def __init__(self, width: int, depth: int = 2, *, scale: float = 1.0) -> None:
        self.width = width


class Base:
    def __init__(self, batch_size: int = 1, num_workers: int = 0) -> None:
        self.batch_size = batch_size


class Forwards(Base):
    def __init__(self, fraction: float = 0.1, **loader) -> None:
        super().__init__(**loader)


class Inherits(Forwards):
    pass


class Hidden(Base):  # forwards in a way the source does not show
    def __init__(self, **loader) -> None:
        options = dict(loader)
        super().__init__(**options)


@dataclass
class Fields:
    size: int = 1


class Meta(type):
    def __call__(cls, *args, **kwargs):
        return super().__call__()


class Made(metaclass=Meta):
    def __init__(self) -> None:
        pass


class Both(Plain, Base):
    pass


def _keeps(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, **kwargs)

    return wrapper


def _adds(fn):
    def wrapper(self, extra=None, **kwargs):
        return fn(self, **kwargs)

    return wrapper


class Wrapped:
    @_keeps
    def __init__(self, steps: int = 1) -> None:
        pass


class Extended:
    @_adds
    def __init__(self, steps: int = 1) -> None:
        pass


class Caller:
    def __init__(self) -> None:
        Plain(width=1, detph=2)  # the constructor's own mistake, not the config's


def build(width: int, depth: int = 1):
    return width


def loose(width: int = 1, **rest):
    return width
"""


@pytest.fixture(scope="module")
def kw67(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kw67")
    (root / "kw67").mkdir()
    (root / "kw67" / "__init__.py").write_text("")
    (root / "kw67" / "parts.py").write_text(textwrap.dedent(_SOURCE))
    (root / "kw67" / "runtime.py").write_text(
        "from kw67.parts import Plain\n\nexec('Plain = dict')\n"
    )
    sys.path.insert(0, str(root))
    forget()
    yield "kw67"
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m.split(".")[0] == "kw67"]:
        del sys.modules[name]


# (target, keys, the static answer): None means "not refused here"
_CASES = [
    ("parts.Plain", {"width": 1, "depth": 3, "scale": 2.0}, None),
    (
        "parts.Plain",
        {"width": 1, "detph": 3},
        "x.detph: Plain takes no keyword 'detph'; did you mean x.depth?",
    ),
    ("parts.Plain", {"depth": 3}, "x: Plain needs width, which the config lacks"),
    ("parts.Plain", {"_partial_": True, "depth": 3}, None),  # a partial may leave some out
    ("parts.Forwards", {"fraction": 0.2, "batch_size": 4}, None),  # **kwargs to its base
    (
        "parts.Forwards",
        {"batch_sise": 4},
        "x.batch_sise: Forwards takes no keyword 'batch_sise'; did you mean x.batch_size?",
    ),
    (
        "parts.Inherits",
        {"num_worker": 2},
        "x.num_worker: Inherits takes no keyword 'num_worker'; did you mean x.num_workers?",
    ),
    ("parts.Hidden", {"batch_size": 4}, None),
    ("parts.Hidden", {"batch_sise": 4}, None),  # unseen forwarding: instantiate answers
    ("parts.Fields", {"sise": 1}, None),  # a dataclass's signature is made at run time
    ("parts.Made", {"anything": 1}, None),  # so is a metaclass's
    ("parts.Both", {"anything": 1}, None),  # several bases: the MRO decides
    (
        "parts.Wrapped",
        {"step": 1},
        "x.step: Wrapped takes no keyword 'step'; did you mean x.steps?",
    ),
    ("parts.Extended", {"extra": 1}, None),  # a decorator that is not a wraps forwarder
    ("parts.build", {"widht": 1}, "x.widht: build takes no keyword 'widht'; did you mean x.width?"),
    ("parts.loose", {"anything": 1}, None),
    ("runtime.Plain", {"anything": 1}, None),  # rebound at run time
]


@pytest.mark.parametrize(("target", "keys", "problem"), _CASES)
def test_each_keyword_is_checked_against_the_signature_the_source_shows(
    kw67: str, target: str, keys: dict, problem: str | None
) -> None:
    forget()
    target = f"{kw67}.{target}"
    assert keyword_problem({"x": {"_target_": target, **keys}}) == problem
    try:  # Python's own verdict: the static answer refuses only what Python refuses
        instantiate(OmegaConf.create({"_target_": target, **keys}))
        accepted = True
    except Exception:
        accepted = False
    assert problem is None or not accepted


def test_an_unseen_forwarding_refused_at_instantiate_gets_the_same_line(kw67: str) -> None:
    cfg = OmegaConf.create({"data": {"_target_": "kw67.parts.Hidden", "batch_sise": 4}})
    with pytest.raises(Exception) as caught:
        instantiate(cfg.data)
    assert unexpected_keyword_line(caught.value) == (
        "data.batch_sise: Hidden takes no keyword 'batch_sise'; did you mean data.batch_size?"
    )
    assert unexpected_keyword_line(ValueError("Error in call to target 'x.Y':")) is None
    with pytest.raises(Exception) as inner:  # a call the constructor makes: a crash, not input
        instantiate(OmegaConf.create({"_target_": "kw67.parts.Caller"}))
    assert "unexpected keyword argument 'detph'" in str(inner.value)
    assert unexpected_keyword_line(inner.value) is None


def _yaml_conf(tmp_path: Path, text: str) -> str:
    conf = tmp_path / "conf" / "model"
    conf.mkdir(parents=True)
    (conf / "typo.yaml").write_text(textwrap.dedent(text))
    return f"hydra.searchpath=[file://{tmp_path / 'conf'},file://{TEST_CONF}]"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "+model.net.hiden=16",
            "model.net.hiden: OwnedNet takes no keyword 'hiden'; did you mean model.net.hidden?",
        ),
        (
            "+model.optimizer.weight_decya=0.1",
            "model.optimizer.weight_decya: SGD takes no keyword 'weight_decya'; did you mean "
            "model.optimizer.weight_decay?",
        ),
        (
            "+trainer.max_epoch=1",
            "trainer.max_epoch: Trainer takes no keyword 'max_epoch'; did you mean "
            "trainer.max_epochs?",
        ),
        (
            "+data.batch_sise=3",
            "data.batch_sise: OwnedDigits takes no keyword 'batch_sise'; did you mean "
            "data.batch_size?",
        ),
        ("~model.net", "model: OwnedClassifier needs net, which the config lacks"),
    ],
)
def test_a_misspelt_keyword_on_the_command_line_is_one_line(override: str, expected: str) -> None:
    assert check_command_line(CONF, "train", with_baseline([*OWNED, override])) == expected


def test_a_misspelt_keyword_in_a_cloners_yaml_is_one_line(tmp_path: Path) -> None:
    search = _yaml_conf(
        tmp_path,
        """
        defaults:
          - owned
          - _self_
        net:
          hiden: 8
        """,
    )
    assert check_command_line(
        CONF, "train", with_baseline([search, "data=owned", "model=typo"])
    ) == ("model.net.hiden: OwnedNet takes no keyword 'hiden'; did you mean model.net.hidden?")


def test_the_script_answers_a_misspelt_keyword_before_torch(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_script(
        "train.py",
        *OWNED,
        "+model.net.hiden=16",
        f"hydra.run.dir={run_dir}",
        python_options=("-X", "importtime"),
    )
    imported, stderr = imported_and_stderr(proc)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert stderr == [
        "error: model.net.hiden: OwnedNet takes no keyword 'hiden'; did you mean model.net.hidden?"
    ]
    assert not imported & HEAVY, sorted(imported & HEAVY)
    assert not run_dir.exists()


@pytest.mark.slow  # a run up to the model's instantiate (torch and Lightning imported)
def test_a_keyword_only_instantiate_refuses_is_one_line_exit_2_and_writes_nothing(
    kw67: str, tmp_path: Path
) -> None:
    """Forwarding the source does not show: the run starts, and the constructor's refusal is
    the same one line (no traceback file, the run dir undone)."""
    run_dir = tmp_path / "run"
    proc = call_script(
        "train.py",
        *OWNED,
        "model.net._target_=kw67.parts.Hidden",
        "~model.net.num_classes",
        "~model.net.hidden",
        "~model.net.dropout",
        "+model.net.batch_sise=3",
        f"hydra.run.dir={run_dir}",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert errors == [
        "error: model.net.batch_sise: Hidden takes no keyword 'batch_sise'; did you mean "
        "model.net.batch_size?"
    ], proc.stderr[-3000:]
    assert not run_dir.exists() or not any(run_dir.rglob("error.log"))


def test_a_sweep_expands_into_the_jobs_hydra_launches() -> None:
    jobs = sweep_jobs(["seed=1,2", "data.batch_size=8", "+model.net.w=range(1,3)"])
    assert jobs == [
        (["data.batch_size=8", "seed=1", "+model.net.w=1"], ["seed=1", "+model.net.w=1"]),
        (["data.batch_size=8", "seed=1", "+model.net.w=2"], ["seed=1", "+model.net.w=2"]),
        (["data.batch_size=8", "seed=2", "+model.net.w=1"], ["seed=2", "+model.net.w=1"]),
        (["data.batch_size=8", "seed=2", "+model.net.w=2"], ["seed=2", "+model.net.w=2"]),
    ]
    many = sweep_jobs(["seed=range(0,100)", "data.batch_size=8,16"])
    assert len(many) == 100 and {job[0][1] for job in many} == {
        "data.batch_size=8",
        "data.batch_size=16",
    }


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["seed=1,2", "data._target_=tests.owned.data.OwnedDigit"],
            "data._target_=tests.owned.data.OwnedDigit: tests.owned.data has no 'OwnedDigit'; "
            "did you mean tests.owned.data.OwnedDigits?",
        ),
        (["seed=1,abc"], "seed='abc' is invalid: expected an integer (job seed=abc)"),
    ],
)
def test_a_multirun_checks_every_job_before_the_first(
    argv: list[str], expected: str, tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    proc = call_script("train.py", "-m", *OWNED, *argv, f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [f"error: {expected}"]
    assert not sweep.exists()
