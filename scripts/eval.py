"""Evaluate a checkpoint: `python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt`."""

from pathlib import Path

from trainwell.cli import hydra_entry
from trainwell.training.evaluate import evaluate

main = hydra_entry(Path(__file__).resolve().parents[1] / "conf", "eval", evaluate)

if __name__ == "__main__":
    main()
