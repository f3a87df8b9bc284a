"""bonus_only_processors (vLLM #42744): min_p reaches the bonus token but not the rows that judge proposals.

The variant was added as a spec value (semantics.BONUSES["processed_target"]) and a registry entry; every engine
runs it by name. Its law has two exact limits that a wrong implementation would miss: with k = 0 every token is a
bonus token, so the decoder is plain decoding of the processed chain; with k >= horizon no bonus token lands inside
the horizon, so the text is the unprocessed chain's (min_p missing everywhere).
"""
import pytest
import torch

import specdec_lib as sd
from specdec_lib.markov.registry import MODES
from specdec_lib.policy import policy_table

CH = sd.reference_chain()
MODE = "bonus_only_processors"
H = 3


def law(k: int) -> torch.Tensor:
    return sd.decoder_law(CH.P, CH.Q, start=CH.start, horizon=H, k=k, mode=MODE)


def chain_law(P: torch.Tensor) -> torch.Tensor:
    return sd.sequence_law(P, start=CH.start, horizon=H)


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * (a - b).abs().sum().item()


def test_the_spec_is_a_registered_value_of_the_bonus_field():
    spec = MODES[MODE].spec
    assert spec.bonus == "processed_target" and not spec.policy_on_target and dict(spec.policy) == {"min_p": 0.3}
    assert not MODES[MODE].exact and MODES[MODE].chapter == "sampling surface"


def test_k_zero_is_plain_decoding_of_the_processed_chain():
    processed = policy_table(CH.P, min_p=0.3)
    assert tv(law(0), chain_law(processed)) < 1e-12


def test_blocks_past_the_horizon_sample_the_unprocessed_chain():
    for k in (H, H + 2):
        assert tv(law(k), chain_law(CH.P)) < 1e-12


def test_in_between_it_is_wrong_and_worse_with_longer_blocks():
    target = chain_law(policy_table(CH.P, min_p=0.3))
    tvs = [tv(law(k), target) for k in (1, 2, H)]
    assert tvs[0] > 0.05 and tvs[0] < tvs[1] < tvs[2]  # more of the text judged by the unprocessed rows


def test_negative_control_the_correct_decoder_under_min_p_is_exact():
    # the same policy applied everywhere (the correct spec) leaves no error: the check above can tell them apart
    processed = policy_table(CH.P, min_p=0.3)
    exact = sd.decoder_law(processed, policy_table(CH.Q, min_p=0.3), start=CH.start, horizon=H, k=2, mode="correct")
    assert tv(exact, chain_law(processed)) < 1e-12 and tv(law(2), chain_law(processed)) > 0.05


def test_reference_and_batched_agree_draw_for_draw():
    # decode_markov one sequence at a time reads the uniforms in the reference's order (test_reference covers
    # every registered mode at four (k, horizon); this keeps the new one in view)
    kw = dict(start=CH.start, horizon=6, k=2, mode=MODE)
    ref = sd.markov.decode_reference(CH.P, CH.Q, num_samples=40, generator=torch.Generator().manual_seed(3), **kw)
    g = torch.Generator().manual_seed(3)
    fast = torch.cat([sd.decode_markov(CH.P, CH.Q, num_samples=1, generator=g, **kw) for _ in range(40)])
    assert torch.equal(ref, fast)


@pytest.mark.stat
def test_the_batched_decoder_samples_the_exact_law():
    # n = 40,000 sequences of 3 tokens (125 cells): a correct sampler exceeds tv_noise_bound (Jensen's mean
    # 1/2 sum sqrt(p (1 - p) / n) plus McDiarmid's sqrt(ln(1e6) / 2n), about 0.04) with probability below 1e-6;
    # the negative control is the processed target, 0.18 away, far outside that bound
    n, exact = 40_000, law(1)
    seqs = sd.decode_markov(CH.P, CH.Q, start=CH.start, horizon=H, k=1, mode=MODE, num_samples=n,
                            generator=torch.Generator().manual_seed(11))
    emp = torch.zeros_like(exact)
    emp.view(-1).index_add_(0, (seqs * torch.tensor([25, 5, 1])).sum(1), torch.full((n,), 1.0 / n, dtype=emp.dtype))
    bound = sd.tv_noise_bound(exact, n)
    assert tv(emp, exact) < bound
    assert tv(emp, chain_law(policy_table(CH.P, min_p=0.3))) > bound
