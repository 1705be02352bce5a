"""A sweep's answer in one table: `<multirun dir>/summary.json`, `summary.md` and `summary.png`.

Jobs that differ only in the pooled keys (`summary.pool`, the seed by default) form one group;
per group, every final metric of the jobs' results.json as n, mean, sample std, min and max.
Built from the files the jobs leave (results.json, .hydra/overrides.yaml), so a partial sweep has
a partial summary and `scripts/summarize.py` rebuilds it anywhere. A cross-validation run and an
Optuna study write the same form.
"""
