"""`make schema`: one JSON Schema per config group, from the `_target_` signatures, that every
shipped config passes and a misspelt keyword fails; a cloner's own classes (in a search dir) get
theirs from the same command, and the editor settings point at each group's schema."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.helpers.config import CONF, REPO, TEST_CONF
from tests.helpers.scripts import run_python, with_pythonpath
from trainwell.schemas import build, editor_settings, file_globs, groups, write
from trainwell.targets import forget


def _load(path: Path) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict[str, Any]]:
    """The schemas of conf/ and of the tests' own search dir (tests/conf: plain classes)."""
    return build([CONF, TEST_CONF])


def _valid(schema: dict[str, Any], config: Any) -> bool:
    return not list(jsonschema.Draft7Validator(schema).iter_errors(config))


_SHIPPED = [
    (group, path) for conf in (CONF, TEST_CONF) for group, ps in groups(conf).items() for path in ps
]


@pytest.mark.parametrize(
    ("group", "path"), _SHIPPED, ids=[str(p.relative_to(REPO)) for _, p in _SHIPPED]
)
def test_every_shipped_config_passes_its_groups_schema(
    shipped: dict[str, dict[str, Any]], group: str, path: Path
) -> None:
    jsonschema.Draft7Validator.check_schema(shipped[group])
    errors = list(jsonschema.Draft7Validator(shipped[group]).iter_errors(_load(path)))
    assert not errors, f"{path}: {errors[0].message[:300]}"


@pytest.mark.example("project.models.digits_cnn")
def test_a_misspelt_keyword_of_a_net_fails_the_model_schema(
    shipped: dict[str, dict[str, Any]],
) -> None:
    config = _load(CONF / "model" / "digits_cnn.yaml")
    assert _valid(shipped["model"], config)
    misspelt = copy.deepcopy(config)
    misspelt["net"]["widht"] = 16
    assert not _valid(shipped["model"], misspelt)
    typed = copy.deepcopy(config)
    typed["net"]["width"] = "sixteen"  # DigitsCNN's width: int
    assert not _valid(shipped["model"], typed)
    typed["net"]["width"] = "${oc.env:WIDTH}"  # an interpolation stands for any value
    assert _valid(shipped["model"], typed)


def test_a_misspelt_keyword_of_an_optimizer_fails_its_groups_schema(
    shipped: dict[str, dict[str, Any]],
) -> None:
    schema = shipped["model.optimizer"]
    config = _load(CONF / "model" / "optimizer" / "adamw.yaml")
    assert _valid(schema, config)
    assert not _valid(schema, {**config, "weight_decya": 0.1})
    assert _valid(schema, {"lr": 0.1})  # an override that names no target fits by its keys
    assert not _valid(schema, {"weight_decya": 0.1})


@pytest.mark.engine
def test_a_search_dirs_plain_lightning_classes_get_their_schema(
    shipped: dict[str, dict[str, Any]],
) -> None:
    """tests/conf names plain LightningModule and nn.Module classes (tests/owned/task.py)."""
    schema = shipped["model"]
    branch = schema["definitions"]["target:tests.owned.task.OwnedNet"]
    assert branch["properties"]["hidden"]["default"] == 32
    assert branch["properties"]["hidden"]["anyOf"][0] == {"type": ["integer", "null"]}
    assert branch["description"].startswith("Flatten -> Linear")
    assert branch["additionalProperties"] is False
    config = _load(TEST_CONF / "model" / "owned.yaml")
    assert _valid(schema, config)
    config["net"]["hiddne"] = 8
    assert not _valid(schema, config)


_SOURCE = '''
import lightning as L


class Closed(L.LightningModule):
    """A module whose every keyword shows."""

    def __init__(self, width: int = 8, rate: float = 0.1, name: str | None = None) -> None:
        super().__init__()


class Forwards(Closed):
    def __init__(self, depth: int = 2, **rest) -> None:
        super().__init__(**rest)


class Loose(L.LightningModule):
    def __init__(self, width: int = 8, **options) -> None:
        super().__init__()
        self.options = dict(options)  # used here, not forwarded: any key may be valid
'''


@pytest.fixture
def cloner(tmp_path: Path):
    """A cloner's module and a config dir naming its classes."""
    (tmp_path / "sch67.py").write_text(textwrap.dedent(_SOURCE))
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "closed.yaml").write_text("_target_: sch67.Closed\nwidth: 4\n")
    (conf / "model" / "loose.yaml").write_text("_target_: sch67.Loose\nanything: 1\n")
    (conf / "model" / "forwards.yaml").write_text("_target_: sch67.Forwards\ndepth: 3\n")
    sys.path.insert(0, str(tmp_path))
    forget()
    yield conf
    sys.path.remove(str(tmp_path))
    sys.modules.pop("sch67", None)
    forget()


@pytest.mark.engine
def test_unknown_keys_are_flagged_only_where_the_signature_shows_all(cloner: Path) -> None:
    schema = build([cloner])["model"]
    assert _valid(schema, {"_target_": "sch67.Closed", "width": 4, "rate": "${lr}", "name": None})
    assert not _valid(schema, {"_target_": "sch67.Closed", "widht": 4})
    assert not _valid(schema, {"_target_": "sch67.Closed", "rate": "fast"})
    assert _valid(schema, {"_target_": "sch67.Loose", "anything": 1})  # **options: open
    assert not _valid(schema, {"_target_": "sch67.Loose", "width": "wide"})  # but typed
    forwards = schema["definitions"]["target:sch67.Forwards"]  # **rest goes to Closed
    assert {
        k: v.get("default")
        for k, v in forwards["properties"].items()
        if k in {"depth", "width", "rate", "name"}
    } == {
        "depth": 2,
        "width": 8,
        "rate": 0.1,
        "name": None,
    }
    assert not _valid(schema, {"_target_": "sch67.Forwards", "widht": 4})
    # A class no config names yet is not underlined before the schemas are made again.
    assert _valid(schema, {"_target_": "sch67.NotYetSeen", "anything": 1})


@pytest.mark.engine
def test_the_schemas_and_editor_settings_are_written_per_group(
    cloner: Path, tmp_path: Path
) -> None:
    out = tmp_path / ".schemas"
    out.mkdir()
    (out / "gone.schema.json").write_text("{}")  # a deleted group's schema
    written = write([cloner], out)
    assert (
        sorted(p.name for p in out.iterdir()) == ["model.schema.json"] == [p.name for p in written]
    )
    settings = tmp_path / ".vscode" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"editor.tabSize": 2}')
    globs = {"model": ["conf/model/*.yaml"], "model.optimizer": ["conf/model/optimizer/*.yaml"]}
    assert editor_settings(settings, globs)
    assert json.loads(settings.read_text()) == {
        "editor.tabSize": 2,
        "yaml.schemas": {
            "./.schemas/model.schema.json": ["conf/model/*.yaml"],
            "./.schemas/model.optimizer.schema.json": ["conf/model/optimizer/*.yaml"],
        },
    }
    settings.write_text("{ // a comment: JSON with comments is left as it is\n}")
    assert not editor_settings(settings, globs)
    assert settings.read_text().startswith("{ // a comment")


def test_the_committed_editor_settings_map_every_group_of_conf(tmp_path: Path) -> None:
    """.vscode/settings.json is what `make schema` writes for conf/ (it cannot drift)."""
    settings = tmp_path / "settings.json"
    settings.write_text((REPO / ".vscode" / "settings.json").read_text())
    assert editor_settings(settings, file_globs([CONF], REPO))
    assert settings.read_text() == (REPO / ".vscode" / "settings.json").read_text()


@pytest.mark.engine
@pytest.mark.slow  # a process that imports torch and Lightning for the annotations
def test_the_script_writes_the_schemas_of_conf_and_a_search_dir(
    cloner: Path, tmp_path: Path
) -> None:
    """`python scripts/schema.py <dir>` (`make schema ARGS=<dir>`) in a copy of the project."""
    project = tmp_path / "project"
    for part in ("scripts", "conf", ".vscode"):
        shutil.copytree(REPO / part, project / part)
    (cloner / "mine").mkdir()
    (cloner / "mine" / "closed.yaml").write_text("_target_: sch67.Closed\n")
    env = {**os.environ, **with_pythonpath(cloner.parent)}
    script = {"path": str(project / "scripts" / "schema.py")}
    proc = run_python(script, [str(cloner)], project, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = {p.name.removesuffix(".schema.json") for p in (project / ".schemas").iterdir()}
    assert written == set(groups(CONF)) | {"mine"}
    mapped = json.loads((project / ".vscode" / "settings.json").read_text())["yaml.schemas"]
    assert mapped["./.schemas/mine.schema.json"] == [f"{cloner.resolve()}/mine/*.yaml"]
    assert f"{cloner.resolve()}/model/*.yaml" in mapped["./.schemas/model.schema.json"]
    mine = json.loads((project / ".schemas" / "mine.schema.json").read_text())
    assert _valid(mine, {"_target_": "sch67.Closed", "width": 3})
    assert not _valid(mine, {"_target_": "sch67.Closed", "widht": 3})

    proc = run_python(script, [str(tmp_path / "nowhere")], project, env)
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: not a config dir: {tmp_path / 'nowhere'}\n",
    )
