"""What a run writes and reads on disk: the run dir and its lock, checkpoint files (atomic,
off the training thread, plain hparams, weights-only reads), results.json, CSV logs that a
resumed run appends to, and the redaction that keeps secrets out of all of them."""
