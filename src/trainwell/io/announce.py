"""A line for the user on stdout, printed once per job (by global rank 0), not once per rank."""

from __future__ import annotations

from lightning.pytorch.utilities import rank_zero_only


@rank_zero_only
def announce(text: str) -> None:
    # Flushed at once: a SLURM .out file or a pipe would otherwise hold the line back until
    # the buffer fills, and a run killed before then never shows it.
    print(text, flush=True)
