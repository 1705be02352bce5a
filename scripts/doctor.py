"""Check an experiment before spending compute: `python scripts/doctor.py [train.py overrides]`."""

from pathlib import Path

import _bootstrap  # noqa: F401  (project root on the import path; a one-line error without the venv)

from trainwell.cli import doctor_job, hydra_entry
from trainwell.doctor.harness.settings import ProbeSettings

# The probe settings are checked with the command line, before torch is imported: a mistyped
# one is answered in a second, not after the doctor has loaded the experiment.
main = hydra_entry(
    Path(__file__).resolve().parents[1] / "conf",
    "doctor",
    doctor_job,
    check_paths=lambda cfg: ProbeSettings.from_cfg(cfg.get("probe")),
)

if __name__ == "__main__":
    main()
