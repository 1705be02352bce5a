"""Lightning's messages that say nothing about the user's run, silenced where they are known."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# ---------------------------------------------------------------------------------------------
# Lightning (seen in 2.6.6) logs advertisements at INFO every time a Trainer is built without
# its LitLogger ("Tip: For seamless cloud logging ... try installing litlogger") and with a plain
# ModelCheckpoint ("Tip: For seamless cloud uploads ... try installing litmodels"), through the
# logger `lightning.pytorch.utilities.rank_zero` that also carries its real notices (GPU
# available, the seed, the checkpoint restored): a filter drops those messages, nothing else.
# ---------------------------------------------------------------------------------------------
RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
ADVERTS = ("[litlogger]", "[litmodels]")


class _DropAdvert(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(advert in str(record.msg) for advert in ADVERTS)


def drop_logger_advert() -> None:
    """Install the filter once per process (every Trainer would otherwise print the tips)."""
    logger = logging.getLogger(RANK_ZERO_LOGGER)
    if not any(isinstance(f, _DropAdvert) for f in logger.filters):
        logger.addFilter(_DropAdvert())


# ---------------------------------------------------------------------------------------------
# `Trainer.test(ckpt_path=...)` warns "Be aware that when using `ckpt_path`, callbacks used to
# create the checkpoint need to be provided ..." (lightning/pytorch/trainer/call.py, 2.6.6) for
# every callback state the checkpoint holds that the Trainer lacks. Evaluating a training
# checkpoint with no callbacks is the point of eval.py, so there it is noise; a resumed fit keeps
# the warning (a renamed callback loses its state there).
# ---------------------------------------------------------------------------------------------
MISSING_CALLBACKS = "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint"


@contextmanager
def callbacks_left_out_on_purpose() -> Iterator[None]:
    """Silence the missing-callbacks warning inside this block only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=MISSING_CALLBACKS)
        yield


# ---------------------------------------------------------------------------------------------
# Lightning 2.6.6 builds its loaders' pytree specs with torch's `LeafSpec()`, which torch 2.14
# deprecates: every fit and test prints "FutureWarning: `isinstance(treespec, LeafSpec)` is
# deprecated ..." from lightning/pytorch/utilities/_pytree.py, about Lightning's code, not the
# run's (Lightning-AI/pytorch-lightning#21326). The filter matches that message from that module
# only: the same warning raised by a user's own code still shows.
# ---------------------------------------------------------------------------------------------
LEAFSPEC_MESSAGE = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
LEAFSPEC_MODULE = r"lightning\.pytorch\.utilities\._pytree"


def silence_lightning_leafspec_warning() -> None:
    """Install the filter once per process."""
    warnings.filterwarnings(
        "ignore", message=LEAFSPEC_MESSAGE, category=FutureWarning, module=LEAFSPEC_MODULE
    )
