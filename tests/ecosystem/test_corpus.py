"""The ecosystem corpus: modules written elsewhere train, evaluate, pass the doctor and resume.

For every case in tests/ecosystem/cases.py (Lightning's demo classes unchanged, and modules in
the shapes public Lightning code takes), through the real scripts (tests/ecosystem/corpus.py
says what each check holds). Here: the default suite's share, the shipping-only modules and the
corpus's coverage; the slow resume runs of every case are in test_corpus_resume_*.py, one file
per share of the cases, so that pytest's workers run them side by side.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ecosystem.cases import (
    BLOBS,
    BY_NAME,
    CASES,
    DATA,
    MODULES,
    Case,
    foreign_data,
    foreign_model,
)
from tests.ecosystem.corpus import SHARES, check_doctor, check_trained, read_results, train_case

# The default suite's share: the Hydra-template pattern, trained through train.py and examined by
# the doctor; one demo class as it ships and manual optimization run with the slow tests.
FAST = ["boring", "hydra_template", "gan"]


@pytest.mark.parametrize(
    "name", [n if n == "hydra_template" else pytest.param(n, marks=pytest.mark.slow) for n in FAST]
)
def test_foreign_module_trains_passes_the_doctor_and_predicts_and_exports(
    name: str, tmp_path: Path
) -> None:
    case = BY_NAME[name]
    check_trained(case, train_case(case, tmp_path / "run"), tmp_path / "run")
    check_doctor(case, tmp_path / "doctor")
    check_shipping(case, tmp_path / "run")


# The one line that refuses a module at predict and at export (None: that command succeeds);
# modules not named here predict and export.
GAN = "TinyGAN.forward cannot take the input"  # its forward is the generator: latent vectors
SHIPPING_REFUSALS: dict[str, tuple[str | None, str | None]] = {
    "gan": (GAN, GAN),
    # "tokens" (N, T, vocab) declares no kind and no raw form: written as returned
    "branching": (None, "torch.export cannot export BranchingClassifier"),
}


def check_shipping(case: Case, run_dir: Path) -> None:
    """predict (test split) and export in-process on the run's best checkpoint, through the
    datamodule's own loaders (none of these has raw_form()): the file's accuracy equals test/acc,
    the export passes parity over the batch form and says so in its manifest; or one line refuses
    it and nothing that looks valid is left."""
    from omegaconf import OmegaConf, open_dict

    from trainwell.deploy.artifact import verify_export
    from trainwell.deploy.export import export_checkpoint
    from trainwell.deploy.loading import saved_config
    from trainwell.deploy.predict import predict_checkpoint
    from trainwell.errors import TrainwellError

    results = read_results(run_dir)
    ckpt = results["best_ckpt"] or results["last_ckpt"]
    cfg = saved_config(ckpt)
    with open_dict(cfg):
        cfg.merge_with(OmegaConf.create({"ckpt_path": ckpt, "split": "test", "input": None}))
    refusals = SHIPPING_REFUSALS.get(case.name, (None, None))
    for command, refusal in zip((predict_checkpoint, export_checkpoint), refusals, strict=True):
        if refusal is not None:
            with pytest.raises(TrainwellError, match=refusal) as err:
                command(cfg)
            assert "\n" not in str(err.value)
    if refusals[1] is not None:
        assert not (run_dir / "export").exists() and not list(run_dir.glob(".export*"))
    if refusals[0] is not None:
        assert not (run_dir / "predictions").exists()
        return
    lines = predict_checkpoint(cfg).read_text().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    assert [int(r[0]) for r in rows] == list(range(len(rows)))  # the position in the split
    header = lines[0].split(",")
    # None of these declares an output kind: the outputs are written as returned (output_<j>),
    # never argmaxed; their argmax is the accuracy the module measured.
    assert header[1] == "output_0", header
    if header[-1] == "target":
        outputs = [[float(c) for c in r[1:-1]] for r in rows]
        picked = [max(range(len(o)), key=o.__getitem__) for o in outputs]
        accuracy = sum(p == int(r[-1]) for p, r in zip(picked, rows, strict=True)) / len(rows)
        assert accuracy == pytest.approx(results["metrics"]["test/acc"], abs=1e-6)
    if refusals[1] is not None:
        return
    export_checkpoint(cfg)
    manifest = verify_export(run_dir / "export")
    assert manifest["input"]["form"] == "batch" and manifest["input"]["range"] is None
    assert manifest["output"]["kind"] == "other"
    for path in ("onnxruntime", "torch_export"):
        assert "agreement" not in manifest["parity"]["paths"][path]  # nothing was argmaxed
        assert manifest["parity"]["paths"][path]["max_abs_diff"] <= 1e-4
    assert manifest["parity"]["samples"] == len(rows)


# Shipped only (their training is the corpus's own patterns): Lightning's DemoModel, a token
# model and a module whose forward branches on the data (dict batches: test_raw_form.py).
SHIPPING_ONLY = {
    "demo_model": BY_NAME["demo_model"],
    "tokens": Case(
        "tokens",
        (*foreign_model(f"{MODULES}.TinyTokenModel"), *foreign_data(f"{DATA}.TokenData")),
        monitor=("val/loss", "min"),
    ),
    "branching": Case("branching", (*foreign_model(f"{MODULES}.BranchingClassifier"), *BLOBS)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHIPPING_ONLY))
def test_foreign_module_predicts_and_exports_or_is_refused_in_one_line(
    name: str, tmp_path: Path
) -> None:
    case = SHIPPING_ONLY[name]
    check_trained(case, train_case(case, tmp_path / "run"), tmp_path / "run")
    check_shipping(case, tmp_path / "run")
    if name == "demo_model":  # served as exported: the batch form over HTTP equals the file
        check_served(tmp_path / "run", tmp_path / "serve")


def check_served(run_dir: Path, serve_dir: Path) -> None:
    """The export served over HTTP answers the test split as the checkpoint's eval does. (The
    demo's data is unseeded random: inputs and eval come from one load, not from the file.)"""
    import httpx
    import numpy as np
    import torch

    from tests.helpers.serving import running_server
    from trainwell.deploy.loading import load_run
    from trainwell.deploy.raw import raw_data

    trained = load_run(run_dir / "checkpoints" / "last.ckpt")
    inputs = raw_data(trained.datamodule, "test").splits["test"][0]
    with torch.inference_mode():
        outputs = trained.module(torch.from_numpy(inputs)).numpy()
    with running_server(run_dir / "export", serve_dir) as url:
        answer = httpx.post(f"{url}/predict", json={"inputs": inputs.tolist()}, timeout=60)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    # An undeclared output is answered as returned: no predictions or probabilities made up.
    assert set(got) == {"outputs"}
    np.testing.assert_allclose(np.array(got["outputs"]), outputs, rtol=1e-5, atol=1e-6)


def test_the_corpus_covers_the_promised_patterns() -> None:
    assert len(CASES) >= 12 and len(BY_NAME) == len(CASES)
    assert {c.name for c in CASES if not c.has_test_step} >= {"gan", "train_only"}


def test_every_case_resumes_in_exactly_one_share() -> None:
    names = [name for share in SHARES.values() for name in share]
    assert sorted(names) == sorted(BY_NAME)
