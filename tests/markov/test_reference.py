"""The readable reference decoder defines the algorithm: the batched decoder matches it draw for draw, and its
samples follow the exact engine's law. Also: a DecoderSpec with an unknown kind fails loudly."""
import pytest
import torch
from stats import tv_bound

import specdec_lib as sd
from specdec_lib.markov import batched
from specdec_lib.markov.registry import MODES, make_decoder
from specdec_lib.markov.spec import DecoderSpec

CH = sd.reference_chain()


def batched_one_at_a_time(mode, k, n, seed, horizon=3):
    """decode_markov with n = 1, n times from one generator: the same uniforms, in the same order, as the reference."""
    g = torch.Generator().manual_seed(seed)
    dec = make_decoder(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, mode=mode, Q_bad=CH.Q_bad)
    t = batched.tables(dec)  # decode_markov(num_samples=1) without rebuilding the tables every call
    return torch.cat([batched.decode_tables(dec, t, num_samples=1, generator=g) for _ in range(n)])


def test_decode_tables_is_decode_markov():
    g = torch.Generator().manual_seed(5)
    a = torch.cat([sd.decode_markov(CH.P, CH.Q, start=0, horizon=3, k=2, num_samples=1, generator=g) for _ in range(3)])
    assert torch.equal(a, batched_one_at_a_time("correct", 2, 3, seed=5))


@pytest.mark.heavy
@pytest.mark.parametrize("mode", list(MODES))
def test_batched_decoder_matches_the_reference_draw_for_draw(mode):
    # every k below, at and above the horizon; 100 sequences each reach every branch of a round many times
    for k, horizon in ((0, 3), (1, 3), (4, 3), (3, 6)):
        if k < MODES[mode].spec.k_min and MODES[mode].spec.schedule == "hf":
            continue  # a schedule's first k must lie in [k_min, k_max]; k = 0 is refused (test_bending)
        ref = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=100, mode=mode,
                                  generator=torch.Generator().manual_seed(k), Q_bad=CH.Q_bad)
        assert torch.equal(ref, batched_one_at_a_time(mode, k, 100, seed=k, horizon=horizon)), (mode, k)


def test_draw_for_draw_catches_a_different_algorithm():
    # negative control: the reference of one mode against the batched decoder of another differs somewhere
    ref = sd.markov.decode_reference(CH.P, CH.Q, start=0, horizon=3, k=2, num_samples=150, mode="correct",
                              generator=torch.Generator().manual_seed(2))
    assert not torch.equal(ref, batched_one_at_a_time("reused_uniform", 2, 150, seed=2))


@pytest.mark.stat
@pytest.mark.parametrize("mode", ["correct", "phantom_history", "reused_uniform", "rejected_kept",
                                  "draft_rewound_too_far", "match_acceptance", "typical_acceptance", "hf_schedule",
                                  "confidence_stop", "coin_peeking", "ngram_lookup"])
def test_reference_samples_follow_the_exact_law(mode):
    n, k = 20_000, 2
    s = sd.markov.decode_reference(CH.P, CH.Q, start=0, horizon=3, k=k, num_samples=n, mode=mode,
                            generator=torch.Generator().manual_seed(11), Q_bad=CH.Q_bad)
    law = sd.decoder_law(CH.P, CH.Q, start=0, horizon=3, k=k, mode=mode, Q_bad=CH.Q_bad)
    # tv_bound: Jensen mean + McDiarmid slack at delta = 1e-6 for n samples, so an exact sampler fails ~1e-6
    assert sd.sequence_tv(s, law) < tv_bound(law, n)


@pytest.mark.stat
def test_reference_law_check_has_power():
    # negative control: correct samples are far from a broken decoder's exact law at the same n
    n = 20_000
    s = sd.markov.decode_reference(CH.P, CH.Q, start=0, horizon=3, k=2, num_samples=n,
                            generator=torch.Generator().manual_seed(11))
    law = sd.decoder_law(CH.P, CH.Q, start=0, horizon=3, k=2, mode="softmax_residual")
    assert sd.sequence_tv(s, law) > tv_bound(law, n)


@pytest.mark.parametrize("field, value, match", [
    ("residual", "normalized", "DecoderSpec.residual must be one of 'normalised', 'softmax', 'target', 'single_token', "
     "'argmax', 'typical'"),
    ("propose", "q", "DecoderSpec.propose must be one of 'Q', 'Q_bad', 'argmax_Q', 'top2_Q'"),
    ("judge", "late", "DecoderSpec.judge must be one of 'aligned', 'off_by_one'"),
    ("draft_context", "stale", "DecoderSpec.draft_context must be one of"),
])
def test_spec_rejects_unknown_kinds(field, value, match):
    with pytest.raises(ValueError, match=match):
        DecoderSpec(**{field: value})


def test_spec_rejects_non_bools_and_bad_policies():
    with pytest.raises(TypeError, match="DecoderSpec.phantom must be a bool"):
        DecoderSpec(phantom=1)
    with pytest.raises(TypeError, match="DecoderSpec.policy must be a tuple"):
        DecoderSpec(policy={"top_p": 0.8})
    assert DecoderSpec() == MODES["correct"].spec  # the correct decoder is the default spec


def test_engines_take_their_arguments_by_keyword():
    with pytest.raises(TypeError):
        sd.decode_markov(CH.P, CH.Q, 0, 3, 2, 100)  # start, horizon, k, n by position: refused
    with pytest.raises(TypeError):
        sd.decoder_law(CH.P, CH.Q, 0, 3, 2)
    with pytest.raises(TypeError):
        sd.markov.decode_reference(CH.P, CH.Q, 0, 3, 2, 100)
    with pytest.raises(ValueError, match="mode must be one of"):
        sd.markov.decode_reference(CH.P, CH.Q, start=0, horizon=3, k=2, num_samples=1, mode="nope")


def test_speculative_decode_is_the_reference_draw_for_draw():
    # the correct-only decoder notebook 02 prints reads the same uniforms in the same order as decode_reference
    from specdec_lib.markov.reference import speculative_decode
    for k, horizon in ((0, 3), (1, 3), (2, 3), (4, 6)):
        ref = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, num_samples=200,
                                         mode="correct",
                                  generator=torch.Generator().manual_seed(k))
        g = torch.Generator().manual_seed(k)
        mine = [speculative_decode(CH.P, CH.Q, start=CH.start, horizon=horizon, k=k, generator=g) for _ in range(200)]
        assert ref.tolist() == mine, k
    # negative control: another decoder from the same uniforms differs somewhere
    other = sd.markov.decode_reference(CH.P, CH.Q, start=CH.start, horizon=3, k=2, num_samples=200,
                                       mode="reused_uniform",
                                generator=torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(2)
    assert other.tolist() != [speculative_decode(CH.P, CH.Q, start=CH.start, horizon=3, k=2, generator=g)
                              for _ in range(200)]
