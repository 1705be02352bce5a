"""P6: CIFAR-10 input pipeline from disk: num_workers / pin_memory / persistent_workers sweep.

    .venv/bin/python benchmarks/data_pipeline.py                   # 10k-image fixture in /tmp
    .venv/bin/python benchmarks/data_pipeline.py --data-dir data/cifar10 --workers 0 2 4 8

Writes a 10,000-image CIFAR-10 in the real on-disk format (cifar-10-batches-py pickles: 5 train
batches + a test batch) unless --data-dir points at a real one, then trains the configured
ResNet-18 (`experiment=resnet_accum data.data_dir=...`, its augmenting train loader) for a few
epochs per setting, timing how long each step waits for its batch (`next(loader)`) versus the
whole step. data-wait fraction = wait / step time: near 0 means the model is the bottleneck.

Every setting is run through the datamodule the config builds (project.data.cifar10.CIFAR10DataModule),
so its own rules apply: pin_memory is forced off without CUDA (nothing to pin for), and
persistent_workers only means something with workers > 0.

Last line: `best_workers=N best_img_s=.. best_wait=.. w0_wait=.. ...` per setting.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from harness import compose, final_line, interleaved, parse_args, summary

from trainwell.compat import set_sampler_epoch

TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


def write_cifar10(root: Path, images: int, seed: int = 0) -> dict[str, str]:
    """`images` train images over the 5 real batch files + a test file of images/10; file -> md5.

    The same format torchvision reads (tests/helpers/cifar_fixture.py writes a tiny one for tests).
    """
    from torchvision.datasets import CIFAR10

    rng = np.random.default_rng(seed)
    folder = root / CIFAR10.base_folder
    folder.mkdir(parents=True, exist_ok=True)
    md5 = {}
    sizes = {name: images // 5 for name in TRAIN_BATCHES} | {"test_batch": max(images // 10, 10)}
    for name, n in sizes.items():
        data = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
        entry = {"batch_label": name, "labels": (np.arange(n) % 10).tolist(), "data": data}
        (folder / name).write_bytes(pickle.dumps(entry))
        md5[name] = hashlib.md5((folder / name).read_bytes()).hexdigest()
    meta = {"label_names": [f"class{i}" for i in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    md5["batches.meta"] = hashlib.md5((folder / "batches.meta").read_bytes()).hexdigest()
    return md5


def trust_fixture(md5: dict[str, str]) -> None:
    """torchvision checks the real files' md5 sums; point its (class-level) list at ours so the
    real integrity check and loader run unchanged on the fixture."""
    from torchvision.datasets import CIFAR10

    CIFAR10.train_list = [[n, md5[n]] for n in TRAIN_BATCHES]
    CIFAR10.test_list = [["test_batch", md5["test_batch"]]]
    CIFAR10.meta = {**CIFAR10.meta, "md5": md5["batches.meta"]}


def run_setting(
    data_dir: Path,
    val_size: int,
    workers: int,
    pin: bool,
    persistent: bool,
    args: argparse.Namespace,
) -> dict[str, float]:
    from hydra.utils import instantiate

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(
            [
                "experiment=resnet_accum",
                f"data.data_dir={data_dir}",
                f"data.val_size={val_size}",
                f"data.batch_size={args.batch}",
                f"data.num_workers={workers}",
                f"data.pin_memory={str(pin).lower()}",
                f"data.persistent_workers={str(persistent).lower()}",
                f"model.net.width={args.width}",
            ],
            Path(tmp),
        )
    dm = instantiate(cfg.data)
    dm.setup("fit")
    torch.manual_seed(0)
    net = instantiate(cfg.model.net).to(args.device).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loader = dm.train_dataloader()
    wait = total = 0.0
    images = 0
    start_all = time.perf_counter()
    for epoch in range(args.epochs):
        set_sampler_epoch(loader, epoch)  # what Lightning does (a no-op for a plain shuffle)
        it = iter(loader)  # worker start-up (without persistent workers) counts as waiting
        for _ in range(args.batches):
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            x = x.to(args.device, non_blocking=True)
            y = y.to(args.device, non_blocking=True)
            t1 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if args.device == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            wait += t1 - t0
            total += t2 - t0
            images += y.shape[0]
        del it
    elapsed = time.perf_counter() - start_all
    return {
        "wait": wait / total if total else float("nan"),
        "img_s": images / elapsed,
        "pin_effective": float(dm.pin_memory),
        "persistent_effective": float(dm.persistent_workers),
    }


def setting_key(workers: int, pin: bool, persistent: bool) -> str:
    return f"w{workers}{'_pin' if pin else ''}{'_pers' if persistent else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="a real CIFAR-10 (default: fixture)"
    )
    parser.add_argument("--images", type=int, default=10_000, help="fixture size")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pin", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--persistent", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=8, help="ResNet-18 width of the consumer")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parse_args(
        parser, argv, "P6 data pipeline: CIFAR-10 format from disk, loader settings sweep"
    )
    with tempfile.TemporaryDirectory(prefix="tw-bench-cifar-") as tmp:
        data_dir = args.data_dir
        val_size = 5000
        if data_dir is None:
            data_dir = Path(tmp) / "cifar10"
            trust_fixture(write_cifar10(data_dir, args.images))
            val_size = args.images // 10
            print(f"fixture: {args.images} train images (real format) in {data_dir}")
        settings = []
        for workers, pin, persistent in itertools.product(args.workers, args.pin, args.persistent):
            if persistent and not workers:
                continue  # no workers to keep alive
            if pin and not torch.cuda.is_available():
                continue  # the datamodule turns pin_memory off without CUDA: same as pin=0
            settings.append((workers, bool(pin), bool(persistent)))
        if not torch.cuda.is_available():
            print(
                "pin_memory=1 skipped: no CUDA here, the datamodule forces it off (nothing to pin)"
            )
        print(
            f"host has {torch.get_num_threads()} torch thread(s) and {__import__('os').cpu_count()} CPUs: "
            "workers compete with the training process for the same cores"
        )
        results = interleaved(
            {
                setting_key(*s): (lambda s=s: run_setting(data_dir, val_size, *s, args))
                for s in settings
            },
            args.reps,
        )
    figures: dict[str, float | int] = {}
    best, best_rate = None, -1.0
    for (workers, pin, persistent), (key, rows) in zip(settings, results.items(), strict=True):
        wait = statistics.median(r["wait"] for r in rows)
        rate = statistics.median(r["img_s"] for r in rows)
        spread = summary([r["img_s"] for r in rows])["spread"]
        print(
            f"{key}: num_workers={workers} pin_memory={int(pin)} persistent_workers="
            f"{int(persistent)}: {rate:.1f} img/s (+/-{100 * spread:.1f}%), data-wait {100 * wait:.1f}%"
        )
        figures[f"{key}_img_s"] = rate
        figures[f"{key}_wait"] = wait
        if rate > best_rate:
            best, best_rate = key, rate
    final_line(best=best, best_img_s=best_rate, **figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
