"""Check an experiment before spending compute: `python scripts/doctor.py [train.py overrides]`."""

from pathlib import Path

from trainwell.cli import hydra_entry
from trainwell.doctor.run import run_doctor

main = hydra_entry(Path(__file__).resolve().parents[1] / "conf", "doctor", run_doctor)

if __name__ == "__main__":
    main()
