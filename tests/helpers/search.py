"""Small Optuna sweeps: trials of a few seconds, and every point of a space in a seeded order."""

# Trials of a few seconds: 2 train batches, 1 val batch, a narrow CNN.
TINY = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "model.net.width=8",
    "print_config=false",
    "callbacks.rich_progress_bar=null",
    "callbacks.rich_model_summary=null",
]

# Every point of a 2-value space, in a seeded order. A trial meant to fail sets model.net.dropout=1.5:
# its type passes the step-0 check, and torch refuses it when the job builds the net.
BRUTE_FORCE = [
    "hydra.sweeper.sampler._target_=optuna.samplers.BruteForceSampler",
    "~hydra.sweeper.sampler.n_startup_trials",
    "hydra.sweeper.params=null",
]
