"""Evaluate a checkpoint: `python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt`."""

from pathlib import Path

from trainwell.cli import eval_job, hydra_entry

main = hydra_entry(Path(__file__).resolve().parents[1] / "conf", "eval", eval_job)

if __name__ == "__main__":
    main()
