"""Fine-tune the pair verifier and choose its threshold by cross-validation.

    python -m training.train [--layers 6] [--epochs 2] [--folds 3] [--fold K] [--judged LOG]

Training pairs: the written question families' (training/families.py), the written
conversation families' (training/conversations.py, for `context: semantic`), the
generator's (training/data/generated_pairs.jsonl, remade by
`python -m training.generate`), fow-cache's train split (by id hash, as cache/eval.py
splits it) and, with `--judged LOG`, a deployment's judged grey-zone pairs
(training/judged.py); never fow-cache's held-out split nor the held-out sets in cache/data/.
A pair the exact checks (cache/checks.py, `any_clash`) already reject never reaches the
model and is left out. Each epoch reads every pair once, in an order drawn at random (the verifier scores
both orders). The top `--layers` layers (all six by default) and the head train, in bfloat16
autocast where the CPU has it; any frozen lower layers run once over every pair and the
epochs run on their output.

Cross-validation: folds by the pair's group (a generated family or template, a fow-cache
id), so a fold never sees a rewording of its own questions. The out-of-fold scores are kept
(training/data/oof_scores.safetensors for the shipped model, `<out>.oof.safetensors`
for another `--out`) and set the thresholds (training/
threshold.py): over the pairs that reach the verifier as the guard runs it, the lowest at
which at most `--max-false` of the near misses pass, over all question pairs and over
fow-cache's alone (the stricter wins); the conversation threshold likewise over the
conversation pairs. `--thresholds-only` chooses them again from the kept scores, in seconds,
after a change to the exact checks. `--fold K` tries other settings on one fold (its
true-hit rates at 1% and 2% false hits beside the shipped run's kept scores) and writes
nothing. Writes cache/data/pair_model.safetensors (the tuned
layers and head; matrices as int8 rows with a scale each, `pair_model.quantized`) and
pair_model.json (thresholds, operating points, cross-validated rates by fold).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch.nn import functional as F

from cache.checks import any_clash
from cache.eval import default_pairs, load_pairs
from cache.minilm import LAYERS, bf16_supported, load_base
from cache.pair_model import WEIGHTS, CrossEncoder, quantized, tokenizer
from training import conversations, families, judged, threshold
from training.generate import OUT as GENERATED


def training_pairs(generated: Path = GENERATED, judged_logs: list[str] | None = None
                   ) -> list[dict]:
    """Family, conversation, generated and fow-cache train pairs, and those of the judged
    logs given (training/judged.py), each with a group, minus exact clashes."""
    pairs = families.pairs() + conversations.pairs() + judged.pairs(judged_logs or [])
    pairs += [json.loads(x) for x in generated.read_text().splitlines() if x.strip()]
    for p in load_pairs(default_pairs(), split="train"):
        if isinstance(p["a"], str) and isinstance(p["b"], str):
            pairs.append({**p, "group": f"fow.{p['id']}", "source": "fow"})
    return [p for p in pairs if any_clash(p["a"], p["b"]) is None]


def fold_of(group: str, folds: int) -> int:
    return int(hashlib.sha1(group.encode()).hexdigest(), 16) % folds


class Features:
    """The frozen layers' output for every pair in both orders (rows 2i and 2i+1)."""

    def __init__(self, model: CrossEncoder, pairs: list[dict], start: int, batch: int = 64) -> None:
        tok = tokenizer()
        tok.no_padding()
        rows = [r for p in pairs for r in ((p["a"], p["b"]), (p["b"], p["a"]))]
        enc = tok.encode_batch(rows)
        self.hidden: list[torch.Tensor] = [None] * len(rows)  # type: ignore[list-item]
        order = sorted(range(len(rows)), key=lambda i: len(enc[i].ids))
        with torch.inference_mode():
            for s in range(0, len(order), batch):
                idx = order[s:s + batch]
                ids, mask, types = _padded([enc[i] for i in idx])
                x = model.run(model.embed(ids, types), mask, 0, start)
                for j, i in enumerate(idx):
                    self.hidden[i] = x[j, :len(enc[i].ids)].to(torch.float16).clone()
        self.labels = torch.tensor([float(p["same_answer"]) for p in pairs for _ in (0, 1)])

    @classmethod
    def cached(cls, path: str | None, pairs: list[dict], start: int) -> Features:
        """`Features` of `pairs`, read from `path` when it holds them, else computed (and
        written there)."""
        digest = hashlib.sha1(json.dumps([(p["a"], p["b"], start) for p in pairs]).encode())
        if path and Path(path).exists():
            saved = torch.load(path)
            if saved["digest"] == digest.hexdigest():
                feats = cls.__new__(cls)
                feats.hidden, feats.labels = saved["hidden"], saved["labels"]
                return feats
        feats = cls(fresh_model().eval(), pairs, start)
        if path:
            torch.save({"digest": digest.hexdigest(), "hidden": feats.hidden,
                        "labels": feats.labels}, path)
        return feats

    def batch(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        t = max(len(self.hidden[r]) for r in rows)
        x = torch.zeros(len(rows), t, self.hidden[0].shape[1])
        mask = torch.zeros(len(rows), t, dtype=torch.long)
        for j, r in enumerate(rows):
            n = len(self.hidden[r])
            x[j, :n], mask[j, :n] = self.hidden[r].float(), 1
        return x, mask


def _padded(encs) -> tuple[torch.Tensor, ...]:
    t = max(len(e.ids) for e in encs)
    ids = torch.tensor([e.ids + [0] * (t - len(e.ids)) for e in encs])
    mask = torch.tensor([e.attention_mask + [0] * (t - len(e.ids)) for e in encs])
    types = torch.tensor([e.type_ids + [0] * (t - len(e.ids)) for e in encs])
    return ids, mask, types


def fresh_model() -> CrossEncoder:
    torch.manual_seed(0)
    model = CrossEncoder()
    load_base(model)
    return model


def train(feats: Features, pair_ids: list[int], start: int, epochs: int, seed: int,
          batch: int = 32, lr: float = 5e-5) -> CrossEncoder:
    """A model whose layers from `start` up and head were trained on `pair_ids`."""
    model = fresh_model()
    tuned = [p for layer in model.layers[start:] for p in layer.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    for p in tuned + list(model.head.parameters()):
        p.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": tuned, "lr": lr},
                             {"params": model.head.parameters(), "lr": lr * 16}], weight_decay=0.01)
    labels = feats.labels[[2 * i for i in pair_ids]]
    pos_weight = (labels == 0).sum() / labels.sum().clamp(min=1)
    steps = epochs * ((len(pair_ids) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[lr, lr * 16], total_steps=steps,
                                                pct_start=0.1)
    rnd = random.Random(seed)
    model.train()
    t0, step = time.time(), 0
    for _ in range(epochs):
        for chunk in batches(feats, [2 * i + rnd.randrange(2) for i in pair_ids], batch, rnd):
            step += 1
            if step % 100 == 0:
                print(f"  step {step}/{steps} at {time.time() - t0:.0f}s", flush=True)
            x, mask = feats.batch(chunk)
            with torch.autocast("cpu", torch.bfloat16, enabled=bf16_supported()):
                logits = model.logits(model.run(x, mask, start), mask)
            loss = F.binary_cross_entropy_with_logits(logits.float(), feats.labels[chunk],
                                                      pos_weight=pos_weight)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.eval()


def fold_report(pairs: list[dict], tried: np.ndarray, shipped: np.ndarray) -> dict:
    """True-hit rates at 1% and 2% false hits of two runs' scores on the same fold, over
    the question and the conversation pairs that the exact checks leave to the model."""
    same = np.array([p["same_answer"] for p in pairs])
    model = np.array([v is None for v in threshold.before_model(pairs)])
    conv = np.array([p.get("source") == "conversation" for p in pairs])
    return {f"{part} true hits at {q:.0%} false": {
                run: round(threshold.true_hits_at(score[sel], same[sel], q), 4)
                for run, score in (("tried", tried), ("shipped", shipped))}
            for part, sel in (("questions", model & ~conv), ("conversations", model & conv))
            for q in (0.01, 0.02)}


def batches(feats: Features, rows: list[int], size: int, rnd: random.Random) -> list[list[int]]:
    """`rows` shuffled, then cut into batches of rows of about one length (little padding),
    the batches shuffled again."""
    rnd.shuffle(rows)
    out = []
    for s in range(0, len(rows), size * 32):
        pool = sorted(rows[s:s + size * 32], key=lambda r: len(feats.hidden[r]))
        out += [pool[i:i + size] for i in range(0, len(pool), size)]
    rnd.shuffle(out)
    return out


def scores(model: CrossEncoder, feats: Features, pair_ids: list[int], start: int) -> np.ndarray:
    """Mean probability over both orders for each pair."""
    out = []
    with torch.inference_mode():
        for s in range(0, len(pair_ids), 64):
            ids = pair_ids[s:s + 64]
            rows = [r for i in ids for r in (2 * i, 2 * i + 1)]
            x, mask = feats.batch(rows)
            with torch.autocast("cpu", torch.bfloat16, enabled=bf16_supported()):
                logits = model.logits(model.run(x, mask, start), mask)
            p = torch.sigmoid(logits.float()).view(-1, 2).mean(1)
            out.append(p.numpy())
    return np.concatenate(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=6, help="top layers to fine-tune")
    ap.add_argument("--max-false", type=float, default=0.01)
    ap.add_argument("--lr", type=float, default=5e-5, help="the tuned layers' peak rate "
                    "(the head's is 16 times it)")
    ap.add_argument("--out", default=str(WEIGHTS))
    ap.add_argument("--thresholds-only", action="store_true", help="no training: choose the "
                    "thresholds again from the stored out-of-fold scores (after a change to "
                    "the exact checks) and rewrite them in the model's JSON")
    ap.add_argument("--features", help="keep the frozen layers' output in this file and "
                    "reuse it when it matches the pairs (reruns skip the slowest step)")
    ap.add_argument("--fold", type=int, help="try other settings on one fold only (about "
                    "a fifth of a full run): train on the others, score this one, and print "
                    "its true-hit rates at 1%% and 2%% false hits beside the shipped run's "
                    "kept scores; nothing is written")
    ap.add_argument("--judged", action="append", default=[], metavar="LOG",
                    help="also train on a deployment's judged pairs (a judge's labelled-pairs "
                    "log, `judge.labels`; may be given more than once)")
    args = ap.parse_args(argv)
    if args.fold is not None and not 0 <= args.fold < args.folds:
        ap.error(f"--fold must be one of 0..{args.folds - 1}")
    t0 = time.time()
    pairs = training_pairs(judged_logs=args.judged)
    fold = np.array([fold_of(p["group"], args.folds) for p in pairs])
    meta_path = Path(args.out).with_suffix(".json")
    # the shipped model's scores live in the repo; another --out keeps its own beside it
    oof_path = (threshold.OOF_SCORES if Path(args.out) == WEIGHTS
                else Path(args.out).with_suffix(".oof.safetensors"))
    if args.thresholds_only:
        meta = json.loads(meta_path.read_text())
        report = threshold.choose(pairs, threshold.load_scores(pairs, oof_path), fold,
                                  args.max_false)
        meta["cv"].update(report)
        meta.update({k: report[k] for k in ("threshold", "conversation_threshold",
                                            "operating_points")})
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        print(json.dumps(report, indent=1))
        return 0
    start = LAYERS - args.layers
    feats = Features.cached(args.features, pairs, start)
    print(f"{len(pairs)} pairs, frozen features in {time.time() - t0:.0f}s", flush=True)
    if args.fold is not None:
        held = np.flatnonzero(fold == args.fold)
        model = train(feats, list(np.flatnonzero(fold != args.fold)), start, args.epochs,
                      seed=args.fold, lr=args.lr)
        tried = scores(model, feats, list(held), start)
        print(json.dumps(fold_report([pairs[i] for i in held], tried,
                                     threshold.load_scores(pairs)[held]), indent=1))
        return 0
    oof = np.zeros(len(pairs))
    for f in range(args.folds):
        model = train(feats, list(np.flatnonzero(fold != f)), start, args.epochs, seed=f,
                      lr=args.lr)
        oof[fold == f] = scores(model, feats, list(np.flatnonzero(fold == f)), start)
        print(f"fold {f} done at {time.time() - t0:.0f}s", flush=True)
    threshold.save_scores(pairs, oof, oof_path)
    report = {**threshold.choose(pairs, oof, fold, args.max_false), "epochs": args.epochs,
              "lr": args.lr}
    final = train(feats, list(range(len(pairs))), start, args.epochs, seed=args.folds,
                  lr=args.lr)
    weights = {f"layers.{i}.{k}": v.contiguous() for i in range(start, LAYERS)
               for k, v in final.layers[i].state_dict().items()}
    weights.update({f"head.{k}": v.contiguous() for k, v in final.head.state_dict().items()})
    save_file(quantized(weights), args.out)
    meta = {"tuned_layers": args.layers, "cv": report,
            **{k: report[k] for k in ("threshold", "conversation_threshold", "operating_points")}}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    print(f"done in {time.time() - t0:.0f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
