"""User-facing errors: a mistake the user can fix, reported as one line naming the cause and the fix."""


class TrainwellError(Exception):
    """Raised for bad input (config, data, checkpoint); the CLI prints it as one line and exits 2."""


def first_line(err: BaseException) -> str:
    """The first line of `err`'s message, for a one-line report (a multi-line message would
    bury the cause); an exception without a message gives its type's name."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def error_line(err: BaseException) -> str:
    """`ValueError: <first line of its message>`, as a traceback's last line reads; just
    `ValueError` when it has no message."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
