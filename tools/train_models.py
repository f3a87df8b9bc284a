"""Train the lab's target and draft models on the Python standard library's own source (`make models`).

Corpus: the top-level *.py files of this interpreter's standard library (sysconfig's "stdlib" path),
sorted by name, read as bytes (vocabulary 256); every 10th file is held out for prompts
(specdec_lib.lab.corpus). Both models are trained from fixed seeds with fixed step counts on the CPU,
so a rerun reproduces the weights bit for bit only with the same Python version (the standard library's
files differ between versions), the same torch version and the same thread count (TRAIN_THREADS).
Writes specdec_lib/lab/weights/pair.pt (target and draft: float16 weights and both configs; sd.lab.load_pair()) and
specdec_lib/lab/weights/draft_deep.pt (a 2-layer draft of width 64, the same format; sd.lab.load_draft("draft_deep")),
and specdec_lib/lab/weights/early_exit.pt: the target after a short early-exit fine-tune (LayerSkip's idea: the loss
of every exit through the shared ln_f and head, beside the last layer's), sd.lab.load_target("target_ee"), and
specdec_lib/lab/weights/medusa.pt: 4 Medusa heads trained on the frozen target, sd.lab.load_heads("medusa"), and
specdec_lib/lab/weights/eagle.pt: an EAGLE-style one-layer feature draft trained on the frozen target (SmoothL1 on the
next feature + 0.1 x cross-entropy through the target's head, as EAGLE-1), sd.lab.load_heads("eagle").

usage: python tools/train_models.py [--steps-scale X] [--models target,draft,draft_deep,target_ee,medusa,eagle]
       (X < 1 for a quick smoke run; writes nothing unless --out; --models draft_deep leaves pair.pt alone)
"""
from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from specdec_lib.lab import corpus, transformer, weights
from specdec_lib.lab.eagle import EagleDraft, eagle_config
from specdec_lib.lab.early_exit import exit_logits
from specdec_lib.lab.medusa import MedusaHeads

TRAIN_THREADS = 2
SEED = 1234
PLAN = {  # name: (config, seed, steps, batch, lr)
    "target": (transformer.TARGET_CONFIG, 1, 2000, 16, 3e-3),
    "draft": (transformer.DRAFT_CONFIG, 2, 1500, 16, 1e-2),
    "draft_deep": (weights.DEEP_DRAFT_CONFIG, 3, 2000, 16, 5e-3),
    "target_ee": (transformer.TARGET_CONFIG, 4, 300, 16, 5e-4),  # fine-tuned from the target, not from scratch
}
MEDUSA = (4, 5, 600, 16, 3e-3)  # (heads, seed, steps, batch, lr): heads on the frozen target, not a CachedLM
EAGLE = (6, 1000, 16, 3e-3)  # (seed, steps, batch, lr): a one-layer feature draft on the frozen target
PLAN_HEADS = {"medusa": MEDUSA, "eagle": EAGLE}  # nets trained on the frozen target
FILES = {"pair": ("target", "draft"), "draft_deep": ("draft_deep",), "early_exit": ("target_ee",),
         "medusa": ("medusa",), "eagle": ("eagle",)}  # stem: models
EXIT_WEIGHT = 1.0  # the early exits' mean cross-entropy, weighed against the last layer's (which keeps weight 1)
HEAD_DECAY = 0.8  # Medusa-1's loss weights the head that looks j tokens further ahead by 0.8 ** (j - 1)
EAGLE_P_WEIGHT = 0.1  # EAGLE-1's p_w: the cross-entropy through the head, beside the features' SmoothL1 (v_w = 1)
EAGLE_NOISE = 0.2  # EAGLE-1's data_noise: U(-1/2, 1/2) x 0.2 added to each input feature (its std at 512 tokens)
ALL = tuple(PLAN) + tuple(PLAN_HEADS)  # what --models may name
SEQ = 192  # training context = the models' max_len


def batches(data: torch.Tensor, batch: int, seq: int, g: torch.Generator):
    """Endless (x, y) pairs of shape (batch, seq): random windows of the corpus and the same shifted by one."""
    while True:
        starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=g)  # (batch,)
        idx = starts[:, None] + torch.arange(seq + 1)  # (batch, seq + 1)
        chunk = data[idx].long()
        yield chunk[:, :-1], chunk[:, 1:]


def logged(step: int, steps: int) -> bool:
    """Whether a step gets a line in the log: every tenth of the run, and its last step."""
    return step % max(1, steps // 10) == 0 or step == steps - 1


def log_line(bar, loss: torch.Tensor, line: str, t0: float) -> None:
    """The loss on the progress bar, and line with the seconds so far in the log beside it."""
    bar.set_postfix(loss=f"{loss.item():.3f}")
    tqdm.write(f"{line}  {time.perf_counter() - t0:6.1f}s")


def train(name: str, data: torch.Tensor, heldout: torch.Tensor, steps_scale: float) -> transformer.CachedLM:
    config, seed, steps, batch, lr = PLAN[name]
    steps = max(1, int(steps * steps_scale))
    torch.manual_seed(SEED + seed)  # nothing below draws from the global generator; belt and braces
    model = transformer.CachedLM(config, seed=seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    data_iter = batches(data, batch, SEQ, torch.Generator().manual_seed(SEED + 10 * seed))
    t0 = time.perf_counter()
    bar = tqdm(range(steps), desc=f"training {name}", unit="step")
    for step in bar:
        x, y = next(data_iter)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if logged(step, steps):
            log_line(bar, loss, f"{name:>6} step {step:4d}/{steps}  loss {loss.item():.3f} nats/byte", t0)
    model.eval()
    with torch.no_grad():
        x, y = next(batches(heldout, 16, SEQ, torch.Generator().manual_seed(SEED)))
        val = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    print(f"{name:>6}: {transformer.n_params(model):,} parameters, held-out loss {val:.3f} nats/byte, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    return model


def heldout_exits(model: transformer.CachedLM, heldout: torch.Tensor) -> list[float]:
    """Held-out nats per byte at each exit (layer 1 .. last) on the same seeded batch the training log reports."""
    x, y = next(batches(heldout, 16, SEQ, torch.Generator().manual_seed(SEED)))
    with torch.no_grad():
        return [F.cross_entropy(z.flatten(0, 1), y.flatten()).item() for z in exit_logits(model, x)]


def finetune_early_exit(target: transformer.CachedLM, data: torch.Tensor, heldout: torch.Tensor,
                        steps_scale: float) -> transformer.CachedLM:
    """A copy of target trained on CE(last layer) + EXIT_WEIGHT * mean CE(each earlier exit), the head shared."""
    config, seed, steps, batch, lr = PLAN["target_ee"]
    steps = max(1, int(steps * steps_scale))
    model = transformer.CachedLM(config, seed=seed)
    model.load_state_dict(target.state_dict())
    before = heldout_exits(model, heldout)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    data_iter = batches(data, batch, SEQ, torch.Generator().manual_seed(SEED + 10 * seed))
    t0 = time.perf_counter()
    bar = tqdm(range(steps), desc="early-exit fine-tune of the target", unit="step")
    for step in bar:
        x, y = next(data_iter)
        ce = [F.cross_entropy(z.flatten(0, 1), y.flatten()) for z in exit_logits(model, x)]
        loss = ce[-1] + EXIT_WEIGHT * torch.stack(ce[:-1]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if logged(step, steps):
            log_line(bar, loss, f"target_ee step {step:4d}/{steps}  exits " + " ".join(f"{c.item():.3f}" for c in ce)
                     + " nats/byte", t0)
    model.eval()
    after = heldout_exits(model, heldout)
    for layer, (b, a) in enumerate(zip(before, after), 1):
        print(f"target_ee: exit after layer {layer}: held-out {b:.3f} -> {a:.3f} nats/byte", flush=True)
    print(f"target_ee: the target's own (last-layer) quality {before[-1]:.3f} -> {after[-1]:.3f} nats/byte, "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    return model


def head_losses(heads: MedusaHeads, target: transformer.CachedLM, x: torch.Tensor, y: torch.Tensor):
    """(cross-entropy, top-1 accuracy) per head on windows x, y (B, SEQ): head j at t against the byte at t + 1 + j."""
    with torch.no_grad():
        h = target.features(x)  # (B, SEQ, C): the frozen target's features
    logits = heads(h)  # (B, SEQ, K, V)
    ce, acc = [], []
    for j in range(1, heads.num_heads + 1):
        z, want = logits[:, :-j, j - 1], y[:, j:]  # (B, SEQ - j, V), (B, SEQ - j)
        ce.append(F.cross_entropy(z.flatten(0, 1), want.flatten()))
        acc.append((z.argmax(-1) == want).double().mean().item())
    return ce, acc


def train_medusa(target: transformer.CachedLM, data: torch.Tensor, heldout: torch.Tensor,
                 steps_scale: float) -> MedusaHeads:
    """Medusa heads on the frozen target: sum over heads of HEAD_DECAY ** (j - 1) * CE(head j)."""
    num_heads, seed, steps, batch, lr = MEDUSA
    steps = max(1, int(steps * steps_scale))
    heads = MedusaHeads(target, num_heads).train()
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    data_iter = batches(data, batch, SEQ, torch.Generator().manual_seed(SEED + 10 * seed))
    val = next(batches(heldout, 16, SEQ, torch.Generator().manual_seed(SEED)))
    with torch.no_grad():
        _, before = head_losses(heads.eval(), target, *val)
    heads.train()
    t0 = time.perf_counter()
    bar = tqdm(range(steps), desc="training medusa heads on the frozen target", unit="step")
    for step in bar:
        ce, _ = head_losses(heads, target, *next(data_iter))
        loss = sum(HEAD_DECAY ** j * c for j, c in enumerate(ce))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if logged(step, steps):
            log_line(bar, loss, f"medusa step {step:4d}/{steps}  heads " + " ".join(f"{c.item():.3f}" for c in ce)
                     + " nats/byte", t0)
    heads.eval()
    with torch.no_grad():
        ce, after = head_losses(heads, target, *val)
    for j, (b, a, c) in enumerate(zip(before, after, ce), 1):
        print(f"medusa: head {j} (the byte {j + 1} ahead): held-out top-1 {b:.3f} -> {a:.3f}, {c.item():.3f} nats/byte",
              flush=True)
    print(f"medusa: {transformer.n_params(heads):,} parameters, {time.perf_counter() - t0:.0f}s", flush=True)
    return heads


def eagle_losses(net: EagleDraft, target: transformer.CachedLM, x: torch.Tensor, noise: float = 0.0,
                 g: torch.Generator | None = None):
    """(SmoothL1, cross-entropy, top-1 of the byte after next, top-1 agreement with the target) on windows x (B, SEQ):
    row t reads (e_{t+1}, f_t) and predicts f_{t+1}, whose head gives the byte t + 2."""
    with torch.no_grad():
        f = target.features(x)  # (B, SEQ, C): the frozen target's features
        e = target.tok_emb(x[:, 1:])  # (B, SEQ - 1, C): the next bytes' embeddings, frozen
        p = torch.softmax(target.head(f[:, 1:]), -1)  # (B, SEQ - 1, V): the target's law of byte t + 2
        f_in = f[:, :-1]
        if noise:
            f_in = f_in + (torch.rand(f_in.shape, generator=g) - 0.5) * noise
    f_hat = net(f_in, e)  # (B, SEQ - 1, C)
    z = F.linear(f_hat, target.head.weight.detach(), target.head.bias.detach())  # (B, SEQ - 1, V)
    l1 = F.smooth_l1_loss(f_hat, f[:, 1:])
    ce = F.cross_entropy(z.flatten(0, 1), p.flatten(0, 1))  # against the target's soft law, as EAGLE-1's ploss
    guess = z.argmax(-1)  # (B, SEQ - 1)
    acc = (guess[:, :-1] == x[:, 2:]).double().mean().item()  # the byte after next, as the data has it
    agree = (guess == p.argmax(-1)).double().mean().item()  # what a greedy round accepts
    return l1, ce, acc, agree


def train_eagle(target: transformer.CachedLM, data: torch.Tensor, heldout: torch.Tensor,
                steps_scale: float) -> EagleDraft:
    """EAGLE's draft on the frozen target, by teacher forcing: SmoothL1(f-hat, f) + EAGLE_P_WEIGHT * CE(head)."""
    seed, steps, batch, lr = EAGLE
    steps = max(1, int(steps * steps_scale))
    net = EagleDraft(eagle_config(target.config), seed=seed)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    data_iter = batches(data, batch, SEQ, torch.Generator().manual_seed(SEED + 10 * seed))
    g = torch.Generator().manual_seed(SEED + 10 * seed + 1)
    val = next(batches(heldout, 16, SEQ, torch.Generator().manual_seed(SEED)))[0]
    with torch.no_grad():
        before = eagle_losses(net, target, val)
    net.train()
    t0 = time.perf_counter()
    bar = tqdm(range(steps), desc="training the eagle draft on the frozen target", unit="step")
    for step in bar:
        l1, ce, _, _ = eagle_losses(net, target, next(data_iter)[0], EAGLE_NOISE, g)
        loss = l1 + EAGLE_P_WEIGHT * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        if logged(step, steps):
            log_line(bar, loss, f"eagle step {step:4d}/{steps}  smooth-L1 {l1.item():.4f}  CE {ce.item():.3f} "
                     "nats/byte", t0)
    net.eval()
    with torch.no_grad():
        after = eagle_losses(net, target, val)
    (l1_b, ce_b, acc_b, agree_b), (l1_a, ce_a, acc_a, agree_a) = before, after
    print(f"eagle: held-out top-1 of the byte after next {acc_b:.3f} -> {acc_a:.3f}, agreement with the target's "
          f"argmax {agree_b:.3f} -> {agree_a:.3f}", flush=True)
    print(f"eagle: held-out smooth-L1 {l1_b.item():.4f} -> {l1_a.item():.4f}, CE {ce_b.item():.3f} -> "
          f"{ce_a.item():.3f} nats/byte, {transformer.n_params(net):,} parameters, {time.perf_counter() - t0:.0f}s",
          flush=True)
    return net


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply every step count (smoke runs)")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="folder for the weights files (default specdec_lib/lab/weights/ for a full run)")
    parser.add_argument("--models", default=",".join(ALL),
                        help=f"comma-separated models to train, from {', '.join(ALL)} (target and draft go together)")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(ALL))
    if unknown or not names:
        parser.error(f"--models must name some of {', '.join(ALL)}, got {args.models!r}")
    stems = [stem for stem, models in FILES.items() if set(models) & set(names)]
    for stem in stems:
        if not set(FILES[stem]) <= set(names):
            parser.error(f"{' and '.join(FILES[stem])} share {stem}.pt: train them together")
    torch.set_num_threads(TRAIN_THREADS)
    out = args.out or (weights.WEIGHTS_DIR if args.steps_scale == 1.0 else None)
    data, heldout = corpus.corpus("train"), corpus.corpus("heldout")
    print(f"corpus: {len(corpus.corpus_files())} stdlib files, {data.numel():,} training bytes, "
          f"{heldout.numel():,} held out; Python {sys.version.split()[0]}, torch {torch.__version__}")
    t0 = time.perf_counter()
    models = {name: train(name, data, heldout, args.steps_scale) for name in PLAN
              if name in names and name != "target_ee"}
    if "target_ee" in names:  # from this run's target, else the committed one
        target = models["target"] if "target" in models else weights.load_target()
        models["target_ee"] = finetune_early_exit(target, data, heldout, args.steps_scale)
    if "medusa" in names:  # on this run's target, else the committed one
        target = models["target"] if "target" in models else weights.load_target()
        models["medusa"] = train_medusa(target, data, heldout, args.steps_scale)
    if "eagle" in names:  # on this run's target, else the committed one
        target = models["target"] if "target" in models else weights.load_target()
        models["eagle"] = train_eagle(target, data, heldout, args.steps_scale)
    print(f"trained {', '.join(models)} in {time.perf_counter() - t0:.0f}s")
    if out is not None:
        for stem in stems:
            path = out / f"{stem}.pt"
            weights.save_models({name: models[name] for name in FILES[stem]}, path)
            print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
