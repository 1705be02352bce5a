"""Which process writes the files a run's processes share: the launch's global rank 0.

A run's processes (DDP ranks, SLURM tasks) all run the same code; files they share (the run
dir's lock and tidying, cross-validation files, results.json, summaries) must have exactly one
writer, or two processes interleave or race on them. Every launcher says who a process is in its
own variables, and each leaves some of them unset:

| launcher                         | sets                                              |
|----------------------------------|---------------------------------------------------|
| Lightning's DDP launcher         | LOCAL_RANK, NODE_RANK (its re-executed ranks, and rank 0 once it launched them) |
| torchrun                         | RANK, LOCAL_RANK, GROUP_RANK (no NODE_RANK)       |
| srun                             | SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID (no LOCAL_RANK) |
| jsrun (LSF)                      | JSM_NAMESPACE_RANK                                |
| a multirun, the trial packer     | none: each job or trial is the launch of its own run |

Rank 0 of a launch is 0 in every variable it has, and every other process is non-zero in at
least one (on a second torchrun node LOCAL_RANK is 0 but RANK and GROUP_RANK are not; an srun
task has no LOCAL_RANK at all), so "all present variables are 0" is the one test that holds
under every launcher, and a single variable is not.
"""

from __future__ import annotations

import os

RANK_VARIABLES = (
    "RANK",
    "GROUP_RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "SLURM_PROCID",
    "JSM_NAMESPACE_RANK",
)


def writes_shared_files() -> bool:
    """True in the one process of a run that writes its shared files (global rank 0)."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)
