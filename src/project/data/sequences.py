"""Variable-length token sequences for language modelling, padded per micro-batch.

By default a seeded synthetic language (generated in memory from `seed`: runs offline, in tests,
in seconds); `path=<UTF-8 text file>` reads real text at character level instead.

Every sample is one sequence `[BOS, s1, ..., sn, EOS]`; a batch is the dict
`{"tokens": inputs, "targets": next tokens, "mask": real positions}`, padded to the longest
sequence *of that micro-batch*. Padding targets are `IGNORE_INDEX`, so a token-level loss skips
them, and the number of real target tokens varies from micro-batch to micro-batch: exactly the
case where averaging the loss per micro-batch and then over micro-batches is wrong (a
LanguageModelTask declares its token count, and the template normalises each optimizer step by
the tokens it really holds).
"""

from __future__ import annotations

import string
from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch.utils.data import Dataset

from project.data.base import SplitDataModule
from trainwell.errors import TrainwellError

_T = TypeVar("_T")

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index: padding targets never count


class TokenSequences(Dataset):
    """A list of 1-D int64 token sequences (map-style: the template shards by index)."""

    def __init__(self, sequences: list[torch.Tensor]) -> None:
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.sequences[index]


def pad_batch(sequences: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Next-token inputs and targets, right-padded to the longest sequence in this batch.

    Right padding under a causal mask: no real position can attend to a pad, so padding changes
    nothing but the ignored positions (a sequence's logits are the same in any batch).
    """
    width = max(len(s) for s in sequences) - 1
    tokens = torch.full((len(sequences), width), PAD, dtype=torch.long)
    targets = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)
    for row, seq in enumerate(sequences):
        n = len(seq) - 1
        tokens[row, :n] = seq[:-1]
        targets[row, :n] = seq[1:]
    return {"tokens": tokens, "targets": targets, "mask": targets != IGNORE_INDEX}


def synthetic_language(
    num_sequences: int, vocab_size: int, min_len: int, max_len: int, topics: int, seed: int
) -> list[torch.Tensor]:
    """Unique sequences of a seeded language a small Transformer learns in a few epochs.

    Each sequence opens with one of `topics` topic symbols; every following symbol is drawn from
    a topic-specific first-order chain in which each symbol has two successors (p = 0.8 / 0.2).
    Predicting well needs the previous symbol *and* the topic at the start (attention over a
    variable distance); the best achievable loss is about 0.5 nats/token (perplexity ~1.65)
    against ln(vocab) for a model that learned nothing. Duplicates are dropped, so no sequence
    can sit in two splits.
    """
    symbols = vocab_size - len(SPECIALS)
    if symbols < max(2, topics):
        raise TrainwellError(
            f"data.vocab_size={vocab_size} leaves {symbols} symbols after the {len(SPECIALS)} "
            f"special tokens; the synthetic language needs at least {max(2, topics)}"
        )
    if not 1 <= min_len <= max_len:
        raise TrainwellError(f"need 1 <= data.min_len <= data.max_len, got {min_len}, {max_len}")
    rng = np.random.default_rng(seed)
    first = len(SPECIALS)
    # successors[topic, symbol] = the two symbols that may follow `symbol` under `topic`
    successors = np.stack(
        [
            np.stack([rng.choice(symbols, size=2, replace=False) for _ in range(symbols)])
            for _ in range(topics)
        ]
    )
    seen: set[tuple[int, ...]] = set()
    out: list[torch.Tensor] = []
    attempts = 0
    while len(out) < num_sequences:
        attempts += 1
        if attempts > 20 * num_sequences:
            raise TrainwellError(
                f"the synthetic language has fewer than {num_sequences} distinct sequences of "
                f"length {min_len}..{max_len}; raise data.max_len or lower data.num_sequences"
            )
        topic = int(rng.integers(topics))
        length = int(rng.integers(min_len, max_len, endpoint=True))
        body = [topic]
        for _ in range(length - 1):
            pick = 0 if rng.random() < 0.8 else 1
            body.append(int(successors[topic, body[-1], pick]))
        key = tuple(body)
        if key in seen:
            continue
        seen.add(key)
        out.append(torch.tensor([BOS, *(first + s for s in body), EOS], dtype=torch.long))
    return out


def read_lines(path: Path, max_len: int) -> list[str]:
    """Non-empty lines of a UTF-8 file, each cut into pieces of at most `max_len` characters."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TrainwellError(
            f"data.path={path} cannot be read as UTF-8 text ({type(err).__name__}: {err})"
        ) from None
    pieces = []
    for line in text.splitlines():
        line = line.rstrip()
        pieces.extend(line[i : i + max_len] for i in range(0, len(line), max_len))
    pieces = [p for p in pieces if p]
    if not pieces:
        raise TrainwellError(f"data.path={path} holds no non-empty line of text")
    return pieces


def char_vocabulary(lines: list[str], vocab_size: int) -> list[str]:
    """The `vocab_size - 4` most frequent characters (ties by code point), after the specials."""
    counts = Counter("".join(lines))
    ranked = sorted(counts, key=lambda ch: (-counts[ch], ch))
    return [*SPECIALS, *ranked[: vocab_size - len(SPECIALS)]]


def encode(line: str, index: dict[str, int]) -> torch.Tensor:
    return torch.tensor([BOS, *(index.get(ch, UNK) for ch in line), EOS], dtype=torch.long)


class SequenceDataModule(SplitDataModule):
    """Causal language-modelling data: a synthetic language by default, or a text file.

    `max_len` is the longest model input (positions); sequences hold at most `max_len - 1`
    symbols plus BOS/EOS. With `path`, the file's non-empty lines are the sequences (longer lines
    are cut), split *contiguously* into train / val / test in file order: deterministic, and
    neighbouring lines (which often repeat phrases) stay in one split. The character vocabulary is
    fitted on the train split only, like any other statistic (the digits' normalisation is too):
    held-out text must not shape the model's inputs, so a character that never occurs in train
    reads as `<unk>` in val/test, and characters beyond `vocab_size - 4` (the rarest) do as well.
    """

    def __init__(
        self,
        path: str | None = None,
        vocab_size: int = 32,
        max_len: int = 48,
        min_len: int = 8,
        num_sequences: int = 2000,
        topics: int = 4,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        **loader_kwargs,
    ) -> None:
        super().__init__(**loader_kwargs)
        if not (val_fraction > 0 and test_fraction > 0 and val_fraction + test_fraction < 1):
            raise TrainwellError(
                "data.val_fraction and data.test_fraction must be positive and sum to less than 1"
            )
        if vocab_size <= len(SPECIALS):
            raise TrainwellError(f"data.vocab_size must exceed {len(SPECIALS)}, got {vocab_size}")
        self.path = path
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.min_len = min_len
        self.num_sequences = num_sequences
        self.topics = topics
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.vocabulary: list[str] | None = None  # characters by id (text mode)
        self.collate_fn = pad_batch

    def _split(self, items: list[_T]) -> dict[str, list[_T]]:
        """The first items train, the next val, the last test: a text file splits in its order."""
        n = len(items)
        val = max(1, round(self.val_fraction * n))
        test = max(1, round(self.test_fraction * n))
        if n - val - test < 1:
            raise TrainwellError(
                f"{n} sequences are too few for a train / val / test split; add data"
            )
        cut = n - val - test
        return {"train": items[:cut], "val": items[cut : cut + val], "test": items[cut + val :]}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if self.path is None:
            sequences = synthetic_language(
                self.num_sequences,
                self.vocab_size,
                self.min_len,
                self.max_len - 1,
                self.topics,
                self.seed,
            )
            splits = self._split(sequences)
        else:
            parts = self._split(read_lines(Path(self.path).expanduser(), self.max_len - 1))
            if self.vocabulary is None:
                # Fitted on the train split only; a checkpoint's vocabulary (load_state_dict) wins.
                self.vocabulary = char_vocabulary(parts["train"], self.vocab_size)
            index = {ch: i for i, ch in enumerate(self.vocabulary)}
            splits = {name: [encode(line, index) for line in part] for name, part in parts.items()}
        self.train_set = TokenSequences(splits["train"])
        self.val_set = TokenSequences(splits["val"])
        self.test_set = TokenSequences(splits["test"])

    def token_names(self) -> list[str]:
        """The name of every token id (text mode: its character), specials first."""
        names = self.vocabulary or [*SPECIALS, *string.ascii_letters]
        return [names[i] if i < len(names) else f"<{i}>" for i in range(self.vocab_size)]

    def state_dict(self) -> dict[str, Any]:
        """The character vocabulary fitted on the train split (None for the synthetic language,
        which fits nothing): Lightning writes it into every checkpoint, so prediction and export
        read the ids the model was trained with."""
        return {"vocabulary": self.vocabulary}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "vocabulary" in state_dict:
            vocabulary = state_dict["vocabulary"]
            self.vocabulary = None if vocabulary is None else list(vocabulary)

    def decode(self, tokens: torch.Tensor) -> str:
        """Token ids back to text (text mode), specials shown by name."""
        names = self.vocabulary or [*SPECIALS, *string.ascii_letters]
        return "".join(names[int(t)] if int(t) < len(names) else "<?>" for t in tokens)

    def raw_form(self) -> dict[str, Any]:
        """What predict, export and the server take: int64 token ids (N, T), T up to max_len,
        each row starting with <bos> and right-padded with <pad> where rows differ in length; the
        graph maps them to next-token scores (N, T, vocab), batch and sequence length dynamic. No
        preprocessing: the ids are the model's input; the vocabulary travels in the checkpoint."""
        splits = {}
        for name in ("train", "val", "test"):
            sequences = getattr(self, f"{name}_set").sequences
            # This datamodule's own padding: inputs are a sequence without its last token.
            batch = pad_batch(sequences)
            index = np.arange(len(sequences), dtype=np.int64)
            splits[name] = (batch["tokens"].numpy(), index, batch["targets"].numpy())
        return {
            "input": {
                "dtype": "int64",
                "shape": [None, None],
                "dynamic_axes": {"0": "batch", "1": "sequence"},
                "range": [0, self.vocab_size - 1],
                "max_sequence": self.max_len,
                "description": "token ids (N, T) as data=sequences encodes them (0 <pad>, 1 <bos>, "
                f"2 <eos>, 3 <unk>), T <= {self.max_len}, each row starting with <bos>, "
                "right-padded with <pad> where rows differ in length",
            },
            "splits": splits,
            "classes": self.token_names(),
            "tokens": {
                "pad": PAD,
                "ignore_index": IGNORE_INDEX,
                "input_key": "tokens",  # pad_batch's dict batches
                "mask_key": "mask",
            },
            "output_meaning": "next-token scores (N, T, vocab) at every position (softmax over "
            "the last axis gives probabilities); a row's next token is read at its last non-<pad> "
            "position",
        }
