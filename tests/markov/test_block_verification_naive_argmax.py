"""vllm-ascend's wrong block verifier as it ran: a one-hot (argmax) draft read with draft probability 1.

Its callers passed draft_probs=None, so the kernel's NO_DRAFT_PROBS branch ran: p_i is the product of the target's
probabilities of the drafts, row i passes iff eta_1 ... eta_i <= p_i, the last passing row wins, and a stop draws the
target's row without the rejected draft. The exact engine gives its TV; the engines agree draw for draw; a seeded
sample matches its exact law and fails the target's.
"""
import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.block_verification import block_residual, block_weights, tau_law
from specdec_lib.markov import batched
from specdec_lib.markov.exact import decoder_walk
from specdec_lib.markov.registry import MODES, make_decoder
from specdec_lib.markov.spec import Decoder, DecoderSpec, spec_tables
from specdec_lib.markov.verifier_map import greedy_draft, verifier_speedup

CH = sd.reference_chain()
MODE, SAMPLED = "block_verification_naive_argmax", "block_verification_naive"
H = 3  # notebook 08's horizon
ARGMAX = greedy_draft(CH.Q)  # (5, 5) one-hot rows at each row's argmax of Q


def law(mode, k, Q=CH.Q, horizon=H, **kw):
    return sd.decoder_law(CH.P, Q, start=CH.start, horizon=horizon, k=k, mode=mode, **kw)


def target(horizon=H, **policy):
    return sd.sequence_law(sd.policy_table(CH.P, **policy) if policy else CH.P, start=CH.start, horizon=horizon)


def tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


def test_registry_entry_cites_what_ran():
    m = MODES[MODE]
    assert m.chapter == "optimal verification" and not m.exact and m.origin == "public code"
    assert m.spec == DecoderSpec(verifier="block_naive", propose="argmax_Q", ratio="argmax_Q")
    for cited in ("8763953", "draft_probs=None", "model_runner_v1.py", "7be6291c", "#7603", "max_spec_len >= 3"):
        assert cited in m.reference, cited
    assert "no caller reached" in MODES[SAMPLED].description and MODE in MODES[SAMPLED].reference


@pytest.mark.parametrize("kw", [{}, {"temperature": 0.5}, {"top_k": 3}, {"top_p": 0.8}])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_it_is_the_port_fed_the_argmax_table(k, kw):
    # the registered variant on the chain's own Q is the sampled-q port run on the one-hot argmax table
    assert (law(MODE, k, **kw) - law(SAMPLED, k, Q=ARGMAX, **kw)).abs().max().item() < 1e-12
    assert tv(law(MODE, k, **kw), law(SAMPLED, k, **kw)) > 1e-2  # negative control: not the sampled-q branch


@pytest.mark.parametrize("k, want", [(2, 0.3999838877), (3, 0.5758006857), (4, 0.6403018068), (6, 0.7374818079)])
def test_exact_tv_over_three_tokens(k, want):
    # the independent read's figures: TV 0.400 at k = 2 and 0.640 at k = 4 over 3 tokens
    assert tv(law(MODE, k), target()) == pytest.approx(want, abs=1e-9)
    assert sd.decoder_stats(CH.P, CH.Q, start=CH.start, horizon=H, k=k, mode=MODE).tv == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("k", [2, 4])
def test_the_token_rule_on_the_same_draft_is_exact(k):
    # what the ordinary kernel does with the same one-hot draft (draft probability 1): sample-and-match, exact
    fixed = DecoderSpec(propose="argmax_Q", ratio="argmax_Q")
    dec = Decoder(fixed, *spec_tables(fixed, CH.P, CH.Q, None), start=CH.start, horizon=H, k=k)
    assert (decoder_walk(dec).law - target()).abs().max().item() < 1e-12
    assert (law("correct", k, Q=ARGMAX) - target()).abs().max().item() < 1e-12


def test_long_run_tokens_per_round():
    # N̄ 2.716 against the token rule's 2.321 at k = 2 (c_d, c_v do not move N̄)
    port = verifier_speedup(CH.P, ARGMAX, k=2, verifier="block_naive", c_d=0.15, c_v=1.0).tokens_per_round
    token = verifier_speedup(CH.P, ARGMAX, k=2, verifier="token", c_d=0.15, c_v=1.0).tokens_per_round
    block = verifier_speedup(CH.P, ARGMAX, k=2, verifier="block", c_d=0.15, c_v=1.0).tokens_per_round
    assert port == pytest.approx(2.7157390444, abs=1e-9) and token == pytest.approx(2.3209408924, abs=1e-9)
    assert abs(block - token) < 1e-12  # exact block verification gains nothing on a one-hot draft


def first_token_law():
    """Horizon 1 by hand from the kernel's rule: the k = 3 argmax drafts from the start, q(x) = 1 at each."""
    P, k = CH.P.double() / CH.P.double().sum(-1, keepdim=True), 3
    x, s = [], CH.start
    for _ in range(k):  # the draft's argmax chain: one block, drafted with probability 1
        s = int(CH.Q[s].argmax())
        x.append(s)
    states = [CH.start, *x]
    q_rows = torch.nn.functional.one_hot(torch.tensor(x), 5).double()  # (k, V) what the kernel reads: q(x_i) = 1
    w = block_weights(P[states], q_rows, torch.tensor(x), naive=True)
    assert torch.allclose(w.p[1:], P[states[:k], x].cumprod(0).clamp(max=1.0))  # p_i: the product of P_j(X_j)
    res = block_residual(P[states], q_rows, w, torch.tensor(0), naive=True)
    out = tau_law(w.h)[0] * res / res.sum()  # tau = 0: P_1 without x_1, renormalised
    out[x[0]] += tau_law(w.h)[1:].sum()
    return out


def test_first_token_law_by_hand():
    assert (law(MODE, 3, horizon=1) - first_token_law()).abs().max().item() < 1e-12
    assert tv(first_token_law(), CH.P[CH.start].double()) > 0.05  # already wrong in the first token


# --- the engines agree ------------------------------------------------------------------------------
def one_at_a_time(k, n, seed, horizon, **kw):
    """decode_markov with num_samples = 1, n times from one generator: the reference decoder's draws."""
    g = torch.Generator().manual_seed(seed)
    dec = make_decoder(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=MODE, **kw)
    t = batched.tables(dec)
    return torch.cat([batched.decode_tables(dec, t, num_samples=1, generator=g) for _ in range(n)])


@pytest.mark.parametrize("k, horizon, kw", [(3, 6, {}), (4, 5, {"temperature": 0.7})])
def test_reference_is_batched_draw_for_draw(k, horizon, kw):
    ref = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=100, mode=MODE,
                                     generator=torch.Generator().manual_seed(k), **kw)
    assert torch.equal(ref, one_at_a_time(k, 100, seed=k, horizon=horizon, **kw))


N = 100_000


@pytest.mark.stat
def test_batched_decoder_against_the_exact_law():
    # tv_bound: P(TV of N exact samples > bound) < 1e-6 (Jensen + McDiarmid, specdec_lib.noise); 125 cells
    samples = sd.decode_markov(CH.P, CH.Q, start=CH.start, horizon=H, k=3, num_samples=N, mode=MODE,
                               generator=torch.Generator().manual_seed(11))
    exact, want = law(MODE, 3), target()
    assert sd.sequence_tv(samples, exact) < tv_bound(exact, N)
    assert tv(exact, want) > 2 * tv_bound(want, N)  # negative control: the target is far away ...
    assert sd.sequence_tv(samples, want) > tv_bound(want, N)  # ... and these samples fail it
