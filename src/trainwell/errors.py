"""User-facing errors: a mistake the user can fix, reported as one line naming the cause and the fix."""


class TrainwellError(Exception):
    """Raised for bad input (config, data, checkpoint); the CLI prints it as one line and exits 2."""

    # The word before the line the CLI prints ("error: <cause>").
    label = "error"


def first_line(err: BaseException) -> str:
    """The first line of `err`'s message, for a one-line report (a multi-line message would
    bury the cause); an exception without a message gives its type's name."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def error_line(err: BaseException) -> str:
    """`ValueError: <first line of its message>`, as a traceback's last line reads; just
    `ValueError` when it has no message. A first line that ends in ':' announces its cause on the
    next lines (Hydra's "Error in call to target 'X':"): the cause's own line follows it, or the
    report would name the wrapper and not what went wrong."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    line = f"{type(err).__name__}: {text.splitlines()[0]}"
    if line.endswith(":") and err.__cause__ is not None:
        line = f"{line} {error_line(err.__cause__)}"
    return line
