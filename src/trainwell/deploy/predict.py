"""`scripts/predict.py ckpt_path=...`: <run dir>/predictions/<split or input stem>.csv (an existing
one is replaced only with overwrite=true: deploy/outputs.py), one row per sample, index order.

The module's prediction is what its `predict_step` returns (else its forward), read as the kind
it declares (io/output_kind.py). Class scores: index, prediction, p_<class> for every class,
target (when the samples have labels); other kinds: io/kind_rows.py.
Token models: one row per sequence with its next-token top-k (`top_k=`, conf/predict.yaml):
index, prediction (the top token id), top_1..top_k (ids), p_top_1..p_top_k (probabilities), and
on a split also log_likelihood (the sum of log p over the sequence's target tokens), tokens (how
many) and target (the true next token: <eos>); -sum(log_likelihood) / sum(tokens) is the split's
token-level loss, results.json's `test/loss` on the test split.
- `split=test` (default): that split of the run's own data, through the datamodule's own batches
  (the path `eval.py` measures), so accuracy (loss for a token model) from the file equals
  results.json's `test/acc` (`test/loss`).
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

from trainwell.deploy.loading import TrainedRun, load_run, run_dir_of
from trainwell.deploy.outputs import prediction_path
from trainwell.deploy.prediction import (
    Prediction,
    check_shape,
    defines_predict_step,
    predict_step,
)
from trainwell.deploy.raw import RawData, RawModel, forward_batch, raw_data
from trainwell.deploy.raw_input import read_raw_input
from trainwell.errors import TrainwellError
from trainwell.io.kind_rows import kind_rows
from trainwell.io.named_paths import deployed_checkpoint
from trainwell.io.output_kind import (
    CLASS_SCORES,
    declared_kind,
)
from trainwell.loading.labels import probability_columns


def _rows(
    index: np.ndarray, logits: np.ndarray, targets: np.ndarray | None, classes: list[str] | None
) -> list[str]:
    probs = torch.softmax(torch.from_numpy(logits).double(), dim=-1).numpy()
    order = np.argsort(index, kind="stable")
    header = ["index", "prediction", *probability_columns(classes, probs.shape[-1])]
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


def _token_rows(
    index: np.ndarray,
    last: np.ndarray,
    k: int,
    likelihood: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
) -> list[str]:
    """Rows of a token model: `last` holds each sequence's next-token logits (N, vocab);
    `likelihood`: (log-likelihood, target token count, next token) per sequence, on a split."""
    probs = torch.softmax(torch.from_numpy(last).double(), dim=-1)
    # Ties broken by the lower id (a stable sort), so the file never depends on topk's order.
    order_k = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :k].numpy()
    top_p = np.take_along_axis(probs.numpy(), order_k, axis=-1)
    header = ["index", "prediction", *(f"top_{j}" for j in range(1, k + 1))]
    header += [f"p_top_{j}" for j in range(1, k + 1)]
    if likelihood is not None:
        header += ["log_likelihood", "tokens", "target"]
    lines = [",".join(header)]
    for i in np.argsort(index, kind="stable"):
        cells = [str(int(index[i])), str(int(order_k[i, 0]))]
        cells += [str(int(t)) for t in order_k[i]] + [f"{p:.6f}" for p in top_p[i]]
        if likelihood is not None:
            ll, count, target = likelihood
            cells += [f"{ll[i]:.9g}", str(int(count[i])), str(int(target[i]))]
        lines.append(",".join(cells))
    return lines


def write_csv(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def _top_k(cfg: DictConfig, vocab: int) -> int:
    k = cfg.get("top_k", 5)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= vocab:
        raise TrainwellError(f"top_k={k}: choose an integer from 1 to the vocabulary size {vocab}")
    return k


def _predict_tokens(run: TrainedRun, raw: RawData, cfg: DictConfig, source: object) -> list[str]:
    """Next-token top-k per sequence (and its log-likelihood on a split)."""
    module = run.module
    k = _top_k(cfg, len(raw.classes or []))
    last, ll, counts, nexts = [], [], [], []
    with torch.inference_mode():
        if source:
            samples = _raw_samples(source, raw)  # right padding only: the spec checked it
            lengths = raw.spec.lengths(samples)
            model = RawModel(raw.preprocess, module).eval()
            for start in tqdm(range(0, len(samples), 256), desc="predict"):
                rows = slice(start, start + 256)
                logits = model(torch.from_numpy(samples[rows]))
                pick = torch.from_numpy(lengths[rows] - 1)
                last.append(logits[torch.arange(len(logits)), pick].float().numpy())
            index = np.arange(len(samples))
            return _token_rows(index, np.concatenate(last), k, None)
        split = _split(raw, cfg)
        _, index, _ = raw.splits[split]
        loader = getattr(run.datamodule, f"{split}_dataloader")()
        for batch in tqdm(loader, desc=f"predict {split}"):
            logits = module(batch["tokens"]).double()
            mask, targets = batch["mask"], batch["targets"]
            pick = mask.sum(dim=1) - 1  # the last real position predicts the sequence's last token
            rows = torch.arange(len(logits))
            last.append(logits[rows, pick].numpy())
            logp = torch.log_softmax(logits, dim=-1)
            taken = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            ll.append(torch.where(mask, taken, 0.0).sum(dim=1).numpy())
            counts.append(mask.sum(dim=1).numpy())
            nexts.append(targets[rows, pick].numpy())
    likelihood = (np.concatenate(ll), np.concatenate(counts), np.concatenate(nexts))
    return _token_rows(index, np.concatenate(last), k, likelihood)


def _raw_samples(source: object, raw: RawData) -> np.ndarray:
    """The samples of an `input=` file, checked by the spec the server checks requests with."""
    return raw.spec.check(read_raw_input(str(source), raw.spec), where=f"input={source}")


def _split(raw: RawData, cfg: DictConfig) -> str:
    """The `split=` to predict (test by default), one the datamodule's raw form has."""
    split = str(cfg.get("split", "test"))
    if split not in raw.splits:
        raise TrainwellError(f"split={split}: choose one of {', '.join(raw.splits)}")
    return split


def predict_checkpoint(cfg: DictConfig) -> Path:
    ckpt = deployed_checkpoint(cfg, "predict.py")
    source = cfg.get("input")
    split = str(cfg.get("split", "test"))
    out = prediction_path(run_dir_of(ckpt), split, source, bool(cfg.get("overwrite", False)))
    print(f"checkpoint: {Path(ckpt).resolve()}", flush=True)
    run = load_run(ckpt, cfg)
    raw = raw_data(run.datamodule, split)
    if raw.tokens:
        lines = _predict_tokens(run, raw, cfg, source)
    else:
        lines = _predict_classes(run, raw, cfg, source)
    out.parent.mkdir(exist_ok=True)
    write_csv(out, lines)
    print(f"predictions: {out}", flush=True)
    return out


def _predict_classes(run: TrainedRun, raw: RawData, cfg: DictConfig, source: object) -> list[str]:
    """Rows of a module's predictions: class scores as predict.py always wrote them, any other
    kind as io/kind_rows.py writes it (io/output_kind.py says which)."""
    kind = declared_kind(run.module, raw.classes)
    step = defines_predict_step(run.module)
    outs = []
    with torch.inference_mode():
        if source:
            samples = _raw_samples(source, raw)
            model = RawModel(raw.preprocess, Prediction(run.module)).eval()
            for start in tqdm(range(0, len(samples), 256), desc="predict"):
                outs.append(_numbers(model(torch.from_numpy(samples[start : start + 256]))))
            index, targets = np.arange(len(samples)), None
        else:
            split = _split(raw, cfg)
            _, index, targets = raw.splits[split]
            loader = getattr(run.datamodule, f"{split}_dataloader")()
            name = type(run.datamodule).__name__
            for i, batch in enumerate(tqdm(loader, desc=f"predict {split}")):
                if step:  # predict_step is the prediction, as in Lightning
                    outs.append(_numbers(predict_step(run.module, batch, i)))
                else:
                    outs.append(_numbers(forward_batch(run.module, batch, name)))
    logits = np.concatenate(outs)
    check_shape(logits, kind, run.module)
    if kind.kind != CLASS_SCORES:
        return kind_rows(index, logits, targets, kind)
    return _rows(index, logits, targets, kind.names)


def _numbers(out: torch.Tensor) -> np.ndarray:
    """A batch's outputs as numpy: floats as float32 (what the exported graph computes in)."""
    return (out.float() if out.is_floating_point() else out).numpy()
