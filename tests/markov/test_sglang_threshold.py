"""Act V, SGLang's lossy thresholds (sglang_threshold): the kernel's rule on the three engines, exact only at 1, 1.

The model is held to a line-by-line port of SGLang's TreeSpeculativeSamplingTargetOnly loop on a chain (a tree
of width 1), draw for draw; the engines agree with each other draw for draw and with the exact law in TV.
"""
import dataclasses
import functools

import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.markov import batched, exact
from specdec_lib.markov.registry import MODES, make_decoder
from specdec_lib.markov.semantics import threshold_accept
from specdec_lib.markov.spec import Decoder, spec_tables

CH = sd.reference_chain()
MODE = "sglang_threshold"
N = 100_000
LOSSY = {"threshold_single": 0.5, "threshold_acc": 0.5}


def opts(single, acc):
    return {"threshold_single": single, "threshold_acc": acc}


def law(options=None, k=2, horizon=3, Q=CH.Q):
    return sd.decoder_law(CH.P, Q, start=0, horizon=horizon, k=k, mode=MODE, options=options)


def tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


@functools.cache
def samples(single, acc, k=2, horizon=3, n=N):
    g = torch.Generator().manual_seed(int(100 * single) + 7 * int(100 * acc) + k)
    return sd.decode_markov(CH.P, CH.Q, start=0, horizon=horizon, k=k, num_samples=n, mode=MODE, generator=g,
                            options=opts(single, acc))


# --- the registry entry and its options -------------------------------------------------------------------
def test_entry_is_registered_with_its_source_and_options():
    m = MODES[MODE]
    assert m.chapter == "bending the rules" and m.origin == "public code" and m.exact  # exact at SGLang's 1.0, 1.0
    assert m.options == ("threshold_single", "threshold_acc")
    assert (m.spec.threshold_single, m.spec.threshold_acc) == (1.0, 1.0)
    assert (m.spec.propose, m.spec.acceptance, m.spec.residual, m.spec.bonus) == ("argmax_Q", "threshold",
                                                                                   "single_token", "target")
    for where in ("speculative_sampling.cuh", "TreeSpeculativeSamplingTargetOnly @ ", "eagle_info.py",
                  "eagle_worker.py", "#"):
        assert where in m.reference, where


@pytest.mark.parametrize("options, exc, match", [
    ({"threshold_single": 1.5}, ValueError, r"DecoderSpec.threshold_single must lie in \[0, 1\], got 1.5"),
    ({"threshold_acc": -0.1}, ValueError, r"DecoderSpec.threshold_acc must lie in \[0, 1\], got -0.1"),
    ({"threshold_acc": "0.5"}, TypeError, "DecoderSpec.threshold_acc must be a real number"),
    ({"threshold": 0.5}, ValueError, "takes the options 'threshold_single', 'threshold_acc'; got 'threshold'"),
])
def test_options_are_validated_by_name(options, exc, match):
    with pytest.raises(exc, match=match):
        law(options)


def test_threshold_table_is_the_kernels_test():
    p = torch.tensor([[0.6, 0.3, 0.1, 0.0]], dtype=torch.float64)
    # p >= threshold_single keeps y outright; below it the coin is compared with p / threshold_acc
    assert threshold_accept(p, threshold_single=0.5, threshold_acc=0.5).tolist() == [[1.0, 0.6, 0.2, 0.0]]
    assert threshold_accept(p, threshold_single=1.0, threshold_acc=1.0).tolist() == p.tolist()  # the exact test
    # threshold_acc 0 is divided as 1e-9 (the launcher's floor): every token with mass passes, p = 0 never does
    assert threshold_accept(p, threshold_single=1.0, threshold_acc=0.0).tolist() == [[1.0, 1.0, 1.0, 0.0]]
    assert threshold_accept(p, threshold_single=0.0, threshold_acc=1.0).tolist() == [[1.0] * 4]  # p >= 0: all


# --- exactness ------------------------------------------------------------------------------------------
@pytest.mark.heavy
@pytest.mark.parametrize("k, horizon", [(1, 3), (2, 3), (4, 3), (3, 5)])
def test_exact_at_one_one_whatever_the_draft(k, horizon):
    # for any proposal y chosen without the coin: accept with p(y), else p without y, is p; so the greedy draft
    # and a draft sampled from Q are both exact at 1.0, 1.0
    want = sd.sequence_law(CH.P, start=0, horizon=horizon)
    assert (law(opts(1.0, 1.0), k=k, horizon=horizon) - want).abs().max().item() < 1e-12
    spec = dataclasses.replace(MODES[MODE].spec, propose="Q")
    sampled = exact.decoder_walk(Decoder(spec, *spec_tables(spec, CH.P, CH.Q, None), start=0, horizon=horizon,
                                         k=k)).law
    assert (sampled - want).abs().max().item() < 1e-12


@pytest.mark.parametrize("single, acc", [(0.5, 1.0), (1.0, 0.5), (0.5, 0.5), (0.01, 0.01), (0.0, 0.0)])
def test_lossy_below_one(single, acc):
    want = sd.sequence_law(CH.P, start=0, horizon=3)
    assert tv(law(opts(single, acc)), want) > 2 * tv_bound(want, N)  # more than 100,000 samples could show


def test_a_threshold_below_every_reachable_probability_changes_nothing():
    # threshold_single only bites where some drafted p(y) >= it: the greedy chain's p(y) stay below 0.93
    assert (law(opts(0.95, 1.0)) - law()).abs().max().item() < 1e-15
    assert tv(law(opts(0.9, 1.0)), law()) > 0.01  # negative control: P[4, 3] = 0.923 >= 0.9 is kept outright


@pytest.mark.parametrize("single, acc", [(0.5, 0.5), (0.8, 0.5), (0.3, 0.2)])
def test_threshold_single_is_redundant_unless_below_threshold_acc(single, acc):
    # p(y) >= threshold_single >= threshold_acc already gives p(y) / threshold_acc >= 1: kept by the coin anyway
    assert (law(opts(single, acc)) - law(opts(1.0, acc))).abs().max().item() < 1e-15
    assert tv(law(opts(acc / 2, acc)), law(opts(1.0, acc))) > 0.01  # negative control: single below acc bites


def test_lower_thresholds_buy_tokens_per_call():
    stats = {(s, a): sd.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=4, mode=MODE, options=opts(s, a))
             for s, a in ((1.0, 1.0), (0.5, 1.0), (1.0, 0.5), (0.5, 0.5), (0.01, 0.01))}
    en = {key: s.tokens_per_call for key, s in stats.items()}
    assert en[(1.0, 1.0)] < en[(0.5, 1.0)] < en[(0.5, 0.5)] < en[(0.01, 0.01)]
    assert en[(1.0, 1.0)] < en[(1.0, 0.5)] == en[(0.5, 0.5)]  # single >= acc adds nothing (next test)
    assert en[(0.01, 0.01)] == pytest.approx(3.0)  # every drafted token kept: one round for 3 tokens at k = 4
    assert stats[(1.0, 1.0)].tv < 1e-12 and stats[(1.0, 1.0)].kl < 1e-12
    assert all(s.tv > 0.1 and s.kl > 0.1 for key, s in stats.items() if key != (1.0, 1.0))
    # the greedy draft at SGLang's defaults is exact but slower here than the sampled draft of the correct decoder
    assert en[(1.0, 1.0)] < sd.decoder_stats(CH.P, CH.Q, start=0, horizon=3, k=4).tokens_per_call


# --- the samplers ---------------------------------------------------------------------------------------
@pytest.mark.stat
@pytest.mark.parametrize("single, acc", [(1.0, 1.0), (0.5, 0.5), (1.0, 0.3)])
def test_sampler_agrees_with_its_exact_law(single, acc):
    exact_law = law(opts(single, acc))
    assert sd.sequence_tv(samples(single, acc), exact_law) < tv_bound(exact_law, N)


@pytest.mark.stat
def test_negative_control_lossy_samples_miss_the_target():
    want = sd.sequence_law(CH.P, start=0, horizon=3)
    assert sd.sequence_tv(samples(0.5, 0.5), want) > tv_bound(want, N)
    other = law(opts(1.0, 0.3))
    assert sd.sequence_tv(samples(0.5, 0.5), other) > tv_bound(other, N)


def batched_one_at_a_time(options, k, n, seed, horizon):
    g = torch.Generator().manual_seed(seed)
    dec = make_decoder(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=MODE, options=options)
    t = batched.tables(dec)
    return torch.cat([batched.decode_tables(dec, t, num_samples=1, generator=g) for _ in range(n)])


@pytest.mark.heavy
@pytest.mark.parametrize("options", [None, LOSSY, opts(1.0, 0.3), opts(0.0, 0.0)])
def test_batched_matches_the_reference_draw_for_draw(options):
    for k, horizon in ((0, 3), (1, 3), (4, 3), (3, 6)):
        ref = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=100, mode=MODE,
                                  generator=torch.Generator().manual_seed(k), options=options)
        assert torch.equal(ref, batched_one_at_a_time(options, k, 100, seed=k, horizon=horizon)), (options, k)


# --- the model against the kernel ------------------------------------------------------------------------
def kernel_round(target, draft_tokens, coins, coin_final, threshold_single, threshold_acc, *, swap=False):
    """SGLang's TreeSpeculativeSamplingTargetOnly on a chain, line by line: target[i] is node i's row
    (node 0 the last committed token), draft_tokens[i - 1] node i's token. Returns the committed tokens."""
    k, V = len(draft_tokens), len(target[0])
    if swap:  # negative control: the two thresholds exchanged
        threshold_single, threshold_acc = threshold_acc, threshold_single
    threshold_acc = max(threshold_acc, 1e-9)  # capped_threshold_acc in the launcher
    draft_probs = [[0.0] * V for _ in range(k + 1)]  # the caller's torch.zeros
    prob_acc, offset, coin, accepted, cur = 0.0, 0, coins[0], [], 0
    for _ in range(1, k + 1):  # j = 1 .. num_speculative_tokens - 1
        cur = cur + 1 if cur < k else -1  # retrieve_next_token on a chain
        while cur != -1:
            y = draft_tokens[cur - 1]
            single = target[offset][y]
            prob_acc += single
            if coin <= prob_acc / threshold_acc or single >= threshold_single:
                prob_acc, offset, coin = 0.0, cur, coins[cur]
                accepted.append(y)
                break
            draft_probs[offset][y] = target[offset][y]
            cur = -1  # retrieve_next_sibling: a chain has none
        if cur == -1:
            break
    full = len(accepted) == k  # "there is no draft_probs for the bonus token"
    w = [max(t - (0.0 if full else d), 0.0) for t, d in zip(target[offset], draft_probs[offset])]
    u, total = coin_final * sum(w), 0.0
    for z, x in enumerate(w):  # the first token whose running sum passes u
        total += x
        if total > u:
            return accepted + [z]
    return accepted + [max(z for z, x in enumerate(w) if x > 0)]


def kernel_decode(options, k, n, seed, horizon, swap=False):
    P, greedy = CH.P.double().tolist(), CH.Q.argmax(-1).tolist()  # fast_topk(softmax(draft logits), 1)
    g, out = torch.Generator().manual_seed(seed), []
    for _ in range(n):
        seq, last = [], CH.start
        while len(seq) < horizon:
            u = torch.rand(2 * k + 1, dtype=torch.float64, generator=g).tolist()  # the engines' round of uniforms
            drafts = [greedy[last]]
            for _ in range(k - 1):
                drafts.append(greedy[drafts[-1]])
            target = [P[last]] + [P[y] for y in drafts[:k]]
            seq += kernel_round(target, drafts[:k], u[k:2 * k] + [0.0], u[2 * k], options["threshold_single"],
                                options["threshold_acc"], swap=swap)
            last = seq[-1]
        out.append(seq[:horizon])
    return torch.tensor(out)


@pytest.mark.heavy
@pytest.mark.parametrize("options", [opts(1.0, 1.0), LOSSY, opts(1.0, 0.3), opts(0.3, 1.0), opts(0.0, 0.0)])
def test_reference_is_the_kernel_draw_for_draw(options):
    # the kernel's coin for depth j is our u[k + j], its final coin our u[2k]; it tests coin <= a where the
    # engines test u < a, which differ only when u == a exactly (probability 2^-53 per test at most)
    for k, horizon in ((1, 3), (4, 3), (3, 6)):
        ref = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=300, mode=MODE,
                                  generator=torch.Generator().manual_seed(k), options=options)
        assert torch.equal(ref, kernel_decode(options, k, 300, seed=k, horizon=horizon)), (options, k)


def test_kernel_comparison_has_power():
    # negative control: the kernel with its thresholds exchanged is told apart from the model
    ref = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=6, k=3, num_samples=300, mode=MODE,
                              generator=torch.Generator().manual_seed(3), options=opts(0.3, 1.0))
    assert not torch.equal(ref, kernel_decode(opts(0.3, 1.0), 3, 300, seed=3, horizon=6, swap=True))

