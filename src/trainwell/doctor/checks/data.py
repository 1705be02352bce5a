"""Data checks on the values themselves: finite inputs and targets, no sample shared across splits,
every split drawn like train."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from trainwell.doctor.harness import near_copies
from trainwell.doctor.harness.context import DoctorContext
from trainwell.doctor.harness.samples import content, split_loaders
from trainwell.doctor.harness.scan import Scan, scan
from trainwell.doctor.report.verdict import Verdict, fails, passes, skips, warns


def data_finite(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    s = scan(ctx)
    evidence |= {"batches_scanned": s.batches, "batches_total": s.total_batches}
    if (b := s.first_bad) is not None:
        evidence |= {"first_bad": b, "bad_batches": s.bad_batches}
        return fails(
            f"{b['split']} batch {b['batch']} holds {b['nan']} NaN and {b['inf']} Inf value(s) in "
            f"its {b['part']} ({s.bad_batches} bad batch(es) scanned), which turns the loss into NaN; "
            "clean or impute them in the dataset"
        )
    return passes("every scanned batch is finite")


def _inputs(sample: Any) -> Any:
    return sample[0] if isinstance(sample, tuple | list) and len(sample) == 2 else sample


# Above this share of a split found in train, the split was copied or drawn from train; below,
# duplicates are the kind real data sets hold (the same digit drawn twice, a repeated sentence).
LEAK_FRACTION = 0.1
NEAR_OVER_OWN = 3  # a split's share of near copies over train's own share of near twins


def data_leakage(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    # Every split is hashed from the samples its loaders yield in one pass, whatever their kind.
    limit = ctx.settings.leakage_max_samples
    train_hashes = set(content(ctx.samples.loader, limit, _inputs))
    evidence |= {"max_samples_per_split": limit, "train_samples_hashed": len(train_hashes)}
    overlaps = {}
    for split in ("val", "test"):
        loaders, why = split_loaders(ctx.datamodule, split)
        other = {h for loader in loaders for h in content(loader, limit, _inputs)}
        if not other:
            evidence[f"{split}_not_compared"] = why
            continue
        shared = len(other & train_hashes)
        evidence |= {f"{split}_samples_hashed": len(other), f"{split}_overlap": shared}
        overlaps[split] = (shared, len(other))
    if not overlaps:
        return skips(
            f"no val or test split to compare with train ({evidence.get('val_not_compared')})"
        )
    split, (count, total) = max(overlaps.items(), key=lambda kv: kv[1][0] / kv[1][1])
    fraction = count / total
    evidence["leak_fraction_threshold"] = LEAK_FRACTION
    if fraction < LEAK_FRACTION and (near := _near_copies(ctx, list(overlaps), evidence)):
        return fails(near)
    if not count:
        return passes(
            f"no sample of {'/'.join(overlaps)} is train's, nor a near copy of one (shifted, "
            "flipped, re-encoded) where the inputs are images"
        )
    if fraction >= LEAK_FRACTION:
        return fails(
            f"{count} of {total} {split} samples ({fraction:.0%}) are identical to train "
            f"samples, so {split} metrics measure memorisation; split the data before any "
            "duplication or augmentation"
        )
    return warns(
        f"{count} of {total} {split} samples ({fraction:.1%}) are identical to train samples: "
        "few enough to be natural duplicates, but they inflate the metric by up to that share; "
        "drop them from the split if the data allows"
    )


def _near_copies(ctx: DoctorContext, splits: list[str], evidence: dict[str, Any]) -> str:
    """The finding where a split holds near copies of train images well beyond train's own
    share of near twins ('' where not, or where the inputs are no images)."""
    train = near_copies.images(ctx.samples.loader, near_copies.TRAIN_IMAGES, _inputs)
    if train is None or len(train) < 2:
        return ""
    own_share = near_copies.twin_share(train, min(len(train), near_copies.EVAL_IMAGES))
    evidence["train_near_twin_share"] = round(own_share, 4)
    for split in splits:
        loaders = split_loaders(ctx.datamodule, split)[0]
        found = [near_copies.images(loader, near_copies.EVAL_IMAGES, _inputs) for loader in loaders]
        if not found or found[0] is None:
            continue
        share = float(
            (near_copies.best_similarity(found[0], train) >= near_copies.SIMILAR).float().mean()
        )
        evidence[f"{split}_near_copy_share"] = round(share, 4)
        if share >= LEAK_FRACTION and share >= NEAR_OVER_OWN * own_share:
            return (
                f"{share:.0%} of the first {len(found[0])} {split} images are near copies of train "
                "images (the same image shifted by a pixel, mirrored or re-encoded), where train's "
                f"own images have a near twin {own_share:.0%} of the time, so {split} metrics "
                "measure memorisation; split the data before any augmentation or duplication"
            )
    return ""


# Location apart (in train spreads, beyond NOISE standard errors of the two means) / spread
# ratio (beyond NOISE standard errors of the two spreads) from which a split warns, and fails.
SHIFT = (0.5, 2.0)
NOISE = 4
SPREAD = (2.0, 4.0)
# A split whose feature does not vary at all is judged only where train's tails make that
# unlikely: about n / kurtosis of its n samples would lie off train's bulk (a border pixel that
# is set in one image of a hundred is blank in a split of fifty as often as not).
CONSTANT_DRAWS = 10
# Token ids: total variation beyond this many times what train's halves show warns, and fails.
TOKENS = (3.0, 6.0)
TV_FLOOR = (0.1, 0.3)


def _stats(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each feature's mean, spread and kurtosis (3 if normal, ~1/p if set in a share p of samples;
    3 where raw sums cannot give it: no spread, or a mean so far from zero for its spread that 4th
    powers cancel)."""
    e1, e2, e3, e4 = (m[k] / m[0].clamp(min=1) for k in (1, 2, 3, 4))
    var = (e2 - e1**2).clamp(min=0)
    kurt = (e4 - 4 * e1 * e3 + 6 * e1**2 * e2 - 3 * e1**4) / var**2
    reliable = (var > 0) & (e1.abs() < 1e3 * var.sqrt()) & kurt.isfinite() & (kurt >= 1)
    return e1, var.sqrt(), kurt.where(reliable, 3.0)


def _features(s: Scan, split: str) -> Iterator[dict[str, Any]]:
    """Per input of `split`, its feature furthest from train's (location and spread)."""
    for path, m in s.moments.get(split, {}).items():
        t = s.moments["train"].get(path)
        if m is None or t is None or t.shape != m.shape:
            continue
        (mean_t, std_t, kurt), (mean_s, std_s, _) = _stats(t), _stats(m)
        usable = (std_t > 1e-6 * (1 + mean_t.abs())) & (m[0] > 1) & (t[0] > 1)
        if not bool(usable.any()):
            continue
        n_s, n_t = s.samples[split], s.samples["train"]
        error = NOISE * (1 / n_s + 1 / n_t) ** 0.5
        shift = ((mean_s - mean_t).abs() / std_t - error).clamp(min=0).where(usable, 0.0)
        # A spread's standard error (in log units) grows with the kurtosis: few samples of a
        # heavy-tailed feature may hold none of its rare values.
        spread_error = NOISE * ((kurt - 1).clamp(min=0) / 4 * (1 / n_s + 1 / n_t)).sqrt()
        apart = (std_s / std_t).log().abs().clamp(max=30)  # a split without any spread: e^30
        judged = usable & ((std_s > 0) | (n_s / kurt >= CONSTANT_DRAWS))
        factor = (apart - spread_error).clamp(min=0).exp().where(judged, 1.0)
        i = int(torch.maximum(shift / SHIFT[0], factor / SPREAD[0]).argmax())  # the worst feature
        yield {
            "split": split,
            # A feature by its index along the batch's second dimension (column, channel).
            "feature": path if t.shape[1] == 1 else f"{path}[:, {i}]",
            "shift": float(shift[i] + error),
            "sampling_error": error,
            "spread_factor": float(apart[i].exp()),
            "spread_factor_beyond_noise": float(factor[i]),
            "split_mean_std": [float(mean_s[i]), float(std_s[i])],
            "train_mean_std": [float(mean_t[i]), float(std_t[i])],
            "level": sum(
                float(shift[i]) >= a or float(factor[i]) >= b
                for a, b in zip(SHIFT, SPREAD, strict=True)
            ),
        }


def _shares(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Two id counts as shares of their totals, over the ids of both, and their total variation."""
    width = max(len(a), len(b))
    p, q = (torch.nn.functional.pad(c.double(), (0, width - len(c))) for c in (a, b))
    p, q = p / p.sum(), q / q.sum()
    return p, q, float((p - q).abs().sum() / 2)


def _tokens(s: Scan, split: str) -> Iterator[dict[str, Any]]:
    """Per token input of `split`: how far its id distribution is from train's, against the
    distance two draws of train's size show (train's halves, scaled to these sample sizes)."""
    for path, counts in s.ids.get(split, {}).items():
        train = s.ids["train"].get(path)
        halves = [s.ids.get(f"train/{h}", {}).get(path) for h in (0, 1)]
        if train is None or any(h is None or not h.sum() for h in halves) or not counts.sum():
            continue
        n, n_train, n0, n1 = (float(c.sum()) for c in (counts, train, *halves))
        noise = _shares(*halves)[2] * ((1 / n + 1 / n_train) / (1 / n0 + 1 / n1)) ** 0.5
        share, train_share, tv = _shares(counts, train)
        top = int((share - train_share).argmax())
        level = sum(tv >= max(k * noise, floor) for k, floor in zip(TOKENS, TV_FLOOR, strict=True))
        yield {
            "split": split,
            "feature": path,
            "total_variation": tv,
            "train_halves_scaled": noise,
            "most_over_represented_id": top,
            "its_share": [float(share[top]), float(train_share[top])],
            "level": level,
        }


def data_split_distribution(ctx: DoctorContext, evidence: dict[str, Any]) -> Verdict:
    s = scan(ctx)
    splits = [split for split in ("val", "test") if split in s.batches]
    if "train" not in s.batches or not splits:
        return skips(f"no val or test split to compare with train ({s.missing.get('val', '')})")
    features = [f for split in splits for f in (*_features(s, split), *_tokens(s, split))]
    evidence |= {"compared": features, "batches_scanned": s.batches}
    if not features:
        return skips(
            "no input of the splits' batches could be compared (no per-sample float or token "
            "tensor of one shape in every batch)"
        )
    worst = max(
        features, key=lambda f: (f["level"], f.get("shift", 0), f.get("total_variation", 0))
    )
    if worst["level"] == 0:
        return passes(
            f"every input of {' and '.join(splits)} has train's location and spread "
            f"({len(features)} input(s) compared per split)"
        )
    return Verdict("fail" if worst["level"] == 2 else "warn", _message(worst))


def _message(f: dict[str, Any]) -> str:
    split = f["split"]
    if "total_variation" in f:
        ours, theirs = f["its_share"]
        return (
            f"{split}'s token ids are not distributed like train's: in {f['feature']} the id "
            f"distributions are {f['total_variation']:.2f} apart (total variation; two draws "
            f"of train at these sizes: {f['train_halves_scaled']:.2f}), id "
            f"{f['most_over_represented_id']} making {ours:.0%} of {split}'s ids and "
            f"{theirs:.0%} of train's: the text is processed differently per split (lowercasing, "
            "cleaning, a vocabulary built per split); tokenise every split the same way"
        )
    (ms, ss), (mt, st) = f["split_mean_std"], f["train_mean_std"]
    return (
        f"{split} is not drawn like train: {f['feature']} has mean {ms:.3g} and spread {ss:.3g} "
        f"in {split} against {mt:.3g} and {st:.3g} in train ({f['shift']:.1f} train spreads "
        f"apart, {f['spread_factor']:.1f}x the spread): a transform (scaling, normalisation, a "
        f"unit conversion) applied to one split only; apply the same transforms to every split"
    )
