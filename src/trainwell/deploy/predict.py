"""`scripts/predict.py ckpt_path=...`: <run dir>/predictions.csv, one row per sample, index order.

Columns: index, prediction, p_<class> for every class, target (when the samples have labels).
- `split=test` (default): that split of the run's own data, through the datamodule's own batches
  (the path `eval.py` measures), so accuracy from the file equals results.json's `test/acc`.
- `input=<file>.npy` (or PNGs for uint8 image data): raw samples (deploy/raw.py says the form per
  datamodule) through the checkpoint's preprocessing; `index` is the row in the file (or the
  place of the PNG in name order).
Prediction runs in one process whatever `trainer=` says (ddp_sim included): every sample appears
exactly once, in index order, and the file is the same byte for byte on any world size.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from trainwell.deploy.loading import load_run, run_dir_of
from trainwell.deploy.raw import RawModel, load_raw_input, raw_data
from trainwell.errors import TrainwellError

PREDICTIONS = "predictions.csv"


def _rows(
    index: np.ndarray, logits: np.ndarray, targets: np.ndarray | None, classes: list[str]
) -> list[str]:
    probs = torch.softmax(torch.from_numpy(logits).double(), dim=-1).numpy()
    order = np.argsort(index, kind="stable")
    header = ["index", "prediction", *(f"p_{c}" for c in classes)]
    if targets is not None:
        header.append("target")
    lines = [",".join(header)]
    for i in order:
        cells = [str(int(index[i])), str(int(logits[i].argmax()))]
        cells += [f"{p:.6f}" for p in probs[i]]
        if targets is not None:
            cells.append(str(int(targets[i])))
        lines.append(",".join(cells))
    return lines


def write_csv(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def predict_checkpoint(cfg: DictConfig) -> Path:
    ckpt = cfg.get("ckpt_path")
    if not ckpt:
        raise TrainwellError(
            "predict.py needs a checkpoint: pass ckpt_path=<run dir>/checkpoints/best.ckpt"
        )
    run_dir = run_dir_of(ckpt)
    print(f"run dir: {run_dir}", flush=True)
    run = load_run(ckpt, cfg)
    raw = raw_data(run.datamodule)
    classes = raw.classes or [str(i) for i in range(int(cfg.model.num_classes))]
    source = cfg.get("input")
    outs = []
    with torch.inference_mode():
        if source:
            samples = load_raw_input(source, raw.input_spec)
            model = RawModel(raw.preprocess, run.module).eval()
            for start in tqdm(range(0, len(samples), 256), desc="predict"):
                outs.append(model(torch.from_numpy(samples[start : start + 256])).numpy())
            index, targets = np.arange(len(samples)), None
        else:
            split = str(cfg.get("split", "test"))
            if split not in raw.splits:
                raise TrainwellError(f"split={split}: choose one of {', '.join(raw.splits)}")
            _, index, targets = raw.splits[split]
            loader = getattr(run.datamodule, f"{split}_dataloader")()
            for batch in tqdm(loader, desc=f"predict {split}"):
                outs.append(run.module(batch[0]).float().numpy())
    logits = np.concatenate(outs)
    out = run_dir / PREDICTIONS
    write_csv(out, _rows(index, logits, targets, classes))
    print(f"predictions: {out}", flush=True)
    print(f"run dir: {run_dir}", flush=True)
    return out
