"""Train the configured experiment: `python scripts/train.py experiment=resnet_accum`."""

from pathlib import Path

from trainwell.cli import hydra_entry
from trainwell.training.run import train

main = hydra_entry(Path(__file__).resolve().parents[1] / "conf", "train", train)

if __name__ == "__main__":
    main()
