"""Check an experiment before spending compute: `python scripts/doctor.py [train.py overrides]`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import doctor_job, hydra_entry

main = hydra_entry(Path(__file__).resolve().parents[1] / "conf", "doctor", doctor_job)

if __name__ == "__main__":
    main()
