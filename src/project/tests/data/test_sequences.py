"""SequenceDataModule: a seeded synthetic language or a text file, padded per micro-batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from project.data.sequences import (
    BOS,
    EOS,
    IGNORE_INDEX,
    PAD,
    UNK,
    SequenceDataModule,
    pad_batch,
)
from trainwell.errors import TrainwellError

pytestmark = pytest.mark.example("project.data.sequences")


def _setup(**kwargs) -> SequenceDataModule:
    dm = SequenceDataModule(**kwargs)
    dm.setup("fit")
    return dm


def _all(dataset) -> list[tuple[int, ...]]:
    return [tuple(dataset[i].tolist()) for i in range(len(dataset))]


def test_synthetic_language_is_a_function_of_the_seed() -> None:
    a, b = _setup(num_sequences=300, seed=3), _setup(num_sequences=300, seed=3)
    c = _setup(num_sequences=300, seed=4)
    assert _all(a.train_set) == _all(b.train_set)
    assert _all(a.train_set) != _all(c.train_set)
    assert (len(a.train_set), len(a.val_set), len(a.test_set)) == (240, 30, 30)


def test_synthetic_sequences_vary_in_length_and_never_repeat_across_splits() -> None:
    dm = _setup(num_sequences=500, min_len=4, max_len=20, vocab_size=16)
    seqs = _all(dm.train_set) + _all(dm.val_set) + _all(dm.test_set)
    assert len(set(seqs)) == len(seqs) == 500
    lengths = {len(s) for s in seqs}
    assert min(lengths) == 4 + 2 and max(lengths) == 19 + 2  # BOS + symbols + EOS
    for s in seqs:
        assert s[0] == BOS and s[-1] == EOS
        assert all(4 <= t < 16 for t in s[1:-1])


def test_pad_batch_pads_each_micro_batch_to_its_own_longest() -> None:
    seqs = [torch.tensor([BOS, 5, 6, EOS]), torch.tensor([BOS, 7, EOS])]
    batch = pad_batch(seqs)
    assert batch["tokens"].tolist() == [[BOS, 5, 6], [BOS, 7, PAD]]
    assert batch["targets"].tolist() == [[5, 6, EOS], [7, EOS, IGNORE_INDEX]]
    assert batch["mask"].tolist() == [[True, True, True], [True, True, False]]
    # the same sequence alone: no padding at all
    assert pad_batch(seqs[1:])["tokens"].shape == (1, 2)


def test_train_loader_yields_dict_batches_with_varying_token_counts() -> None:
    dm = _setup(num_sequences=200, batch_size=8)
    counts = [int(b["mask"].sum()) for b in dm.train_dataloader()]
    widths = {b["tokens"].shape[1] for b in dm.train_dataloader()}
    assert len(set(counts)) > 1 and len(widths) > 1


def test_text_file_splits_in_file_order_with_a_train_only_vocabulary(tmp_path: Path) -> None:
    lines = [f"line {i} abc" for i in range(16)] + ["abc line", "line cab", "zz held", "qq also"]
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    dm = _setup(path=str(path), vocab_size=64, max_len=16)
    assert [dm.decode(torch.tensor(s)) for s in _all(dm.val_set)] == [
        "<bos>abc line<eos>",
        "<bos>line cab<eos>",
    ]
    assert dm.vocabulary is not None and "z" not in dm.vocabulary and "q" not in dm.vocabulary
    test_tokens = torch.cat([dm.test_set[i] for i in range(len(dm.test_set))])
    train_chars = set("".join(lines[:16]))
    unseen = sum(ch not in train_chars for ch in "zz heldqq also")
    assert unseen >= 4 and int((test_tokens == UNK).sum()) == unseen
    again = _setup(path=str(path), vocab_size=64, max_len=16)
    assert _all(again.test_set) == _all(dm.test_set)


def test_the_vocabulary_travels_in_the_checkpoint_and_is_never_refitted(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_text("abc\ncab\nbca\nzzz\nqqq\n", encoding="utf-8")
    dm = _setup(path=str(path), vocab_size=16, max_len=8, val_fraction=0.2, test_fraction=0.2)
    assert dm.state_dict() == {"vocabulary": dm.vocabulary}
    assert SequenceDataModule().state_dict() == {"vocabulary": None}  # synthetic: fits nothing
    saved = [*dm.vocabulary[:4], "c", "b", "a"]  # another order than fitting gives
    other = SequenceDataModule(path=str(path), vocab_size=16, max_len=8, val_fraction=0.2,
                               test_fraction=0.2)  # fmt: skip
    other.load_state_dict({"vocabulary": saved})
    other.setup("test")
    assert other.vocabulary == saved
    assert other.test_set[0].tolist() == [1, 3, 3, 3, 2]  # "qqq": unknown to that vocabulary


def test_long_lines_are_cut_into_pieces_in_order(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_text("abcdefghij\nxy\n" * 5, encoding="utf-8")
    dm = _setup(path=str(path), vocab_size=64, max_len=5)  # at most 4 characters per sequence
    decoded = [dm.decode(torch.tensor(s)) for s in _all(dm.train_set)]
    assert decoded[:4] == ["<bos>abcd<eos>", "<bos>efgh<eos>", "<bos>ij<eos>", "<bos>xy<eos>"]


def test_rarest_characters_beyond_the_vocabulary_read_as_unk(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_text("aaaa bbbb cc d\n" * 10, encoding="utf-8")
    dm = _setup(path=str(path), vocab_size=4 + 2, max_len=32)
    assert dm.vocabulary[4:] == ["a", "b"]  # the most frequent (ties by code point)
    assert UNK in dm.train_set[0].tolist()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"path": "/nonexistent/file.txt"}, "cannot be read as UTF-8"),
        ({"vocab_size": 4}, "vocab_size must exceed 4"),
        ({"num_sequences": 2}, "too few"),
        ({"val_fraction": 0.6, "test_fraction": 0.5}, "sum to less than 1"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(TrainwellError, match=match) as err:
        _setup(**kwargs)
    assert "\n" not in str(err.value)


def test_binary_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\xff\xfe\x00\x81" * 10)
    with pytest.raises(TrainwellError, match="cannot be read as UTF-8"):
        _setup(path=str(path))
