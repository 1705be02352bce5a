"""`hydra/sweeper=trainwell_optuna`: Optuna search over a Hydra app, with a study that survives.

Why not hydra-optuna-sweeper: its newest release (1.3.0) requires optuna>=2.10,<3 (Optuna 2.10
does not run on SQLAlchemy 2; facebookresearch/hydra#2162, #3210), and a relaunched sweep runs
`n_trials` more trials numbered from job 0 again (facebookresearch/hydra#2647), so it cannot
continue a killed sweep into the same directories. This sweeper keeps its config keys (`sampler`,
`direction`, `study_name`, `storage`, `n_trials`, `n_jobs`, `params` in Hydra's sweep syntax)
on current Optuna, and adds: trials numbered by their Optuna trial number (job dir = trial
number), `n_trials` as the study's total, failed trials recorded without ending the sweep.
"""
