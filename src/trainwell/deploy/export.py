"""`scripts/export.py ckpt_path=...`: <run dir>/export/ with ONNX, torch.export, safetensors and
a manifest (deploy/artifact.py), each graph over raw samples, parity measured and enforced.

The files are written into a scratch directory beside export/ and renamed into place only after
parity passed and manifest.json was written: a failed or interrupted export leaves nothing that
looks like a valid export.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

import trainwell
from trainwell.deploy import artifact
from trainwell.deploy.loading import load_run, run_dir_of
from trainwell.deploy.outputs import EXPORT_DIR, check_export_target
from trainwell.deploy.parity import ExportFailed, check_parity, parity_figures
from trainwell.deploy.prediction import (
    Prediction,
    check_shape,
    defines_predict_step,
    predict_step,
)
from trainwell.deploy.raw import CLASS_SCORES as CLASS_SCORES_MEANING
from trainwell.deploy.raw import (
    HOOK,
    NO_RAW_FORM,
    RawModel,
    forward_batch,
    raw_data,
)
from trainwell.errors import TrainwellError
from trainwell.io.named_paths import deployed_checkpoint
from trainwell.io.output_kind import (
    CLASS_SCORES,
    STEP_HOOK,
    OutputKind,
    declared_kind,
)
from trainwell.io.results import as_new_file


def _batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def eager_outputs(
    module: torch.nn.Module, loader: Any, keys: tuple[str, str] | None = None
) -> np.ndarray:
    """The module in eval() + inference_mode over the datamodule's own batches.

    Token batches are dicts padded per batch; `keys` names the model input and the mask of real
    positions in them (the raw form's "tokens" entry). The outputs are then the logits at the
    real positions, (tokens, vocab) in sequence then position order, which is what
    `real_positions` takes from the raw path's outputs.
    """
    module.eval()
    step = keys is None and defines_predict_step(module)
    outs = []
    with torch.inference_mode():
        for i, batch in enumerate(loader):
            if isinstance(batch, dict) and keys is not None:
                inputs, mask = keys
                outs.append(module(batch[inputs])[batch[mask]].float().numpy())
                continue
            if step:  # the module's prediction, as predict.py writes it
                out = predict_step(module, batch, i)
            else:
                out = forward_batch(module, batch, "the datamodule")
            outs.append((out.float() if out.is_floating_point() else out).numpy())
    return np.concatenate(outs)


def real_positions(outputs: np.ndarray, targets: np.ndarray, ignore_index: int) -> np.ndarray:
    """(N, T, vocab) outputs of padded token rows -> (real tokens, vocab), padding dropped."""
    return outputs[targets != ignore_index]


def onnx_outputs(path: Path, raw: np.ndarray, batch: int = 256) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: raw[s]})[0] for s in _batches(len(raw), batch)])


def program_outputs(path: Path, raw: np.ndarray, batch: int = 256) -> np.ndarray:
    program = torch.export.load(str(path)).module()
    with torch.inference_mode():
        return np.concatenate(
            [program(torch.from_numpy(raw[s])).numpy() for s in _batches(len(raw), batch)]
        )


def _dynamic_shapes(spec: dict[str, Any]) -> dict[str, dict[int, Any]]:
    """torch.export's dynamic axes from the input spec: batch, and a token model's sequence."""
    axes = {}
    for axis, name in spec["dynamic_axes"].items():
        high = spec.get("max_sequence") if name == "sequence" else 1 << 20
        axes[int(axis)] = torch.export.Dim(name, min=1, max=int(high or 1 << 20))
    return {"inputs": axes}


def _export_graphs(
    model: torch.nn.Module,
    example: torch.Tensor,
    out: Path,
    spec: dict[str, Any],
    output_name: str = "logits",
) -> None:
    dynamic = _dynamic_shapes(spec)
    head = model.model
    where = (
        f"{type(head.module).__name__}.{STEP_HOOK}"
        if isinstance(head, Prediction)
        else type(head).__name__
    )
    try:
        program = torch.export.export(model, (example,), dynamic_shapes=dynamic, strict=False)
    except Exception as err:  # any tracing failure: data-dependent flow, an op
        raise ExportFailed(
            f"torch.export cannot export {where}: {str(err).splitlines()[0]}"
        ) from err
    torch.export.save(program, str(out / artifact.PROGRAM))
    for name in ("onnxscript", "onnx_ir", "torch.onnx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        onnx_program = torch.onnx.export(
            program,
            (example,),
            dynamo=True,
            opset_version=18,
            input_names=["inputs"],
            output_names=[output_name],
            external_data=False,
            verbose=False,
        )
        onnx_program.save(str(out / artifact.ONNX))
    except Exception as err:
        raise ExportFailed(f"ONNX cannot export {where}: {str(err).splitlines()[0]}") from err
    name_dynamic_axes(out / artifact.ONNX, spec)


def name_dynamic_axes(path: Path, spec: dict[str, Any]) -> None:
    """The ONNX graph's symbolic axes named as the manifest names them ("batch", "sequence"):
    the exporter calls them after torch.export's symbols (s0, s85), which a reader of the graph
    cannot match to the manifest."""
    import onnx

    model = onnx.load(str(path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    names = {
        dims[int(axis)].dim_param: name
        for axis, name in spec["dynamic_axes"].items()
        if dims[int(axis)].dim_param
    }
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in names:
                dim.dim_param = names[dim.dim_param]
    onnx.save(model, str(path))


def _save_weights(module: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}, path)
    as_new_file(path)  # safetensors writes 0600


def _manifest_config(cfg: DictConfig) -> dict[str, Any]:
    """The run's model, data and seed, each resolved where it sits in the run's whole config: a
    copy holding only those parts would lose what they read from the others (a data config's
    `${paths.data_dir}`, a schedule's `${trainer.max_epochs}`)."""
    return {
        key: OmegaConf.to_container(cfg[key], resolve=True)
        if OmegaConf.is_config(cfg[key])
        else cfg[key]
        for key in ("model", "data", "seed")
        if key in cfg
    }


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "trainwell": getattr(trainwell, "__version__", "0"),
    }


def _output_entry(
    meaning: str,
    classes: list[str] | None,
    kind: OutputKind | None,
    module: torch.nn.Module,
    name: str,
) -> dict[str, Any]:
    """The manifest's `output`: what the graph's output means and where it comes from."""
    if kind is None:  # a token model: next-token scores over the vocabulary
        return {"name": name, "meaning": meaning, "classes": classes}
    if meaning == CLASS_SCORES_MEANING:  # the raw form said nothing of its own
        meaning = kind.meaning
    step = defines_predict_step(module)
    return {
        "name": name,
        "meaning": meaning,
        "classes": kind.names if kind.kind == CLASS_SCORES else None,
        **kind.manifest(),
        "computed_by": f"{type(module).__name__}.{STEP_HOOK if step else 'forward'}",
    }


def _swap_in(scratch: Path, final: Path) -> None:
    """The complete export into place: an earlier one (checked by check_export_target) is moved
    aside first and removed after, so `final` is never a mix of two exports."""
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        os.replace(final, old)
    os.replace(scratch, final)
    shutil.rmtree(old, ignore_errors=True)


def _samples_origin(datamodule: Any, raw: Any) -> str:
    """Where a split's samples come from, for a refusal: the raw_form() hook or the loaders."""
    name = type(datamodule).__name__
    return f"{name}'s loaders" if raw.batch_form else f"{name}.{HOOK}()"


def export_checkpoint(cfg: DictConfig) -> Path:
    ckpt = deployed_checkpoint(cfg, "export.py")
    run_dir = run_dir_of(ckpt)
    final = run_dir / EXPORT_DIR
    ckpt_sha256 = artifact.sha256_file(Path(ckpt)) if Path(ckpt).is_file() else ""
    check_export_target(final, ckpt_sha256, bool(cfg.get("overwrite", False)))
    print(f"checkpoint: {Path(ckpt).resolve()}", flush=True)
    run = load_run(ckpt, cfg)
    split = str(cfg.get("split", "test"))
    raw = raw_data(run.datamodule, split)
    if raw.batch_form:
        print(NO_RAW_FORM.format(name=type(run.datamodule).__name__, hook=HOOK), flush=True)
    if split not in raw.splits:
        raise TrainwellError(f"split={split}: choose one of {', '.join(raw.splits)}")
    samples, _, targets = raw.splits[split]
    # The samples parity runs on meet the rules the server and predict's input= check.
    samples = raw.spec.check(
        samples, where=f"{_samples_origin(run.datamodule, raw)}'s {split} split"
    )
    kind = None if raw.tokens else declared_kind(run.module, raw.classes)
    # predict_step after forward, where the module defines one; else forward itself (the graph
    # every classifier without a predict_step has always had).
    head = Prediction(run.module) if defines_predict_step(run.module) else run.module
    model = RawModel(raw.preprocess, head).eval()
    scratch = run_dir / f".export.partial-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        # Eager first: a forward that cannot run on the split is named before any tracing.
        loader = getattr(run.datamodule, f"{split}_dataloader")()
        eager = eager_outputs(run.module, loader, raw.batch_keys)
        if kind is not None:
            check_shape(eager, kind, run.module)
        example = torch.from_numpy(samples[: min(len(samples), 4)].copy())
        output_name = "logits" if kind is None or kind.kind == CLASS_SCORES else "outputs"
        _export_graphs(model, example, scratch, raw.spec.manifest(), output_name)
        _save_weights(run.module, scratch / artifact.WEIGHTS)
        others = {
            "onnxruntime": onnx_outputs(scratch / artifact.ONNX, samples),
            "torch_export": program_outputs(scratch / artifact.PROGRAM, samples),
        }
        if raw.tokens:  # compared per real token; right padding changes no real position
            assert targets is not None
            real = {
                name: real_positions(out, targets, raw.ignore_index) for name, out in others.items()
            }
            others, targets = real, targets[targets != raw.ignore_index]
        figures = parity_figures(eager, others, targets, kind.kind if kind else CLASS_SCORES)
        figures.update(split=split, tolerance=float(cfg.get("parity_tolerance", 1e-4)))
        figures["unit"] = "token" if raw.tokens else "sample"
        check_parity(figures, figures["tolerance"])
        manifest = {
            "format": artifact.FORMAT,
            "version": artifact.VERSION,
            "files": artifact.file_entries(scratch),
            "source_checkpoint": {
                "path": str(Path(ckpt).resolve()),
                "sha256": ckpt_sha256,
            },
            "input": raw.spec.manifest(),
            "output": _output_entry(raw.output_meaning, raw.classes, kind, run.module, output_name),
            "config": _manifest_config(run.cfg),
            "versions": _versions(),
            "parity": figures,
        }
        tmp = scratch / (artifact.MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        os.replace(tmp, scratch / artifact.MANIFEST)
        _swap_in(scratch, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for name, entry in figures["paths"].items():
        print(f"{name}: " + ", ".join(f"{k} {v:.6g}" for k, v in entry.items()), flush=True)
    print(f"export: {final}", flush=True)
    return final
