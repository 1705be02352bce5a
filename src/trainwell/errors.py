"""User-facing errors: a mistake the user can fix, reported as one line naming the cause and the fix."""


class TrainwellError(Exception):
    """Raised for bad input (config, data, checkpoint); the CLI prints it as one line and exits 2."""
