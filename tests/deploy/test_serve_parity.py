"""Serving equals validation: the default digits run, exported, served by the real scripts/serve.py
on a free localhost port, answers every test-split sample over HTTP exactly as predictions.csv
and as the checkpoint's own eval (argmax difference 0; probabilities within fp32 tolerance)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers.scripts import run_ok
from tests.helpers.serving import running_server
from trainwell.deploy import load_run
from trainwell.deploy.export import eager_outputs
from trainwell.deploy.raw import raw_data
from trainwell.deploy.serve import softmax

# predictions.csv keeps 6 decimals (rounding: 5e-7); eval runs the checkpoint in torch, the server
# the ONNX graph, whose logits export holds within 1e-4 of eval's. Measured: 8.3e-7 and 3.8e-7.
PROBABILITY_ATOL = 1e-5


@pytest.mark.slow
def test_every_test_sample_over_http_equals_predictions_csv_and_eval(
    digits_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(digits_run, run, ignore=shutil.ignore_patterns("export", "predictions"))
    ckpt = f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"
    run_ok("export.py", tmp_path / "e", ckpt)
    run_ok("predict.py", tmp_path / "p", ckpt)

    trained = load_run(run / "checkpoints" / "best.ckpt")
    samples, index, targets = raw_data(trained.datamodule).splits["test"]
    eval_probs = softmax(eager_outputs(trained.module, trained.datamodule.test_dataloader()))
    lines = (run / "predictions" / "test.csv").read_text().splitlines()
    csv = {int(r[0]): r for r in (line.split(",") for line in lines[1:])}

    with (
        running_server(run / "export", tmp_path / "serve") as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):

        def ask(i: int) -> dict:
            answer = client.post("/predict", json={"inputs": samples[i : i + 1].tolist()})
            assert answer.status_code == 200, answer.text
            return answer.json()

        # Eight clients at once, so that dynamic batching (on by default) mixes requests.
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(len(samples))))

    served = np.array([a["probabilities"][0] for a in answers])
    predicted = np.array([a["predictions"][0] for a in answers])
    assert len(answers) == len(csv) == len(eval_probs)
    file_pred = np.array([int(csv[int(i)][1]) for i in index])
    file_probs = np.array([[float(v) for v in csv[int(i)][2:-1]] for i in index])
    assert (predicted != file_pred).sum() == 0
    assert (predicted != eval_probs.argmax(-1)).sum() == 0
    assert np.abs(served - file_probs).max() <= PROBABILITY_ATOL
    assert np.abs(served - eval_probs).max() <= PROBABILITY_ATOL
    test_acc = json.loads((run / "results.json").read_text())["metrics"]["test/acc"]
    assert float((predicted == targets).mean()) == pytest.approx(test_acc, abs=1e-6)
    print(
        f"served {len(answers)} test samples: argmax differences 0; max |d probability| vs "
        f"predictions.csv {np.abs(served - file_probs).max():.2g}, vs eval "
        f"{np.abs(served - eval_probs).max():.2g}"
    )
