"""The speculative decoder log: what the post says to record, with the denominator beside every rate."""
import dataclasses
import math

import pytest
import torch

from specdec_lib.accounting import reach_probabilities, simulate_blocks, simulate_mixture, survivor_statistics
from specdec_lib.telemetry import SpecDecodeLog, SpecDecodeSummary


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_summary_by_hand():
    log = SpecDecodeLog(k=3, policy="top_p=0.9", temperature=0.7, batch_size=4)
    for a in (0, 1, 3, 3, 2):
        log.record_round(a, draft_time=0.01, verify_time=0.03)
    s = log.summary()
    assert isinstance(s, SpecDecodeSummary)
    assert s.rounds == 5 and s.tokens == 9 + 5
    assert s.tokens_per_target_call == 14 / 5
    assert s.blocks_reaching == [5, 4, 3]  # A >= 0, 1, 2
    assert s.accepted_at == [4, 3, 2]  # A >= 1, 2, 3
    assert s.conditional_acceptance == [4 / 5, 3 / 4, 2 / 3]
    assert s.reach == [4 / 5, 3 / 5, 2 / 5]
    assert s.full_block_fraction == 2 / 5
    assert s.draft_time == pytest.approx(0.05) and s.verify_time == pytest.approx(0.15)
    assert s.tokens_per_second == pytest.approx(14 / 0.2)
    assert (s.policy, s.temperature, s.batch_size, s.k) == ("top_p=0.9", 0.7, 4, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rounds = 0


def test_identity_tokens_per_call_is_one_plus_sum_of_rates():
    # every round emits A + 1: mean tokens = 1 + sum_j P(A >= j) (the check in vllm-project/speculators #1095)
    log = SpecDecodeLog(k=6)
    log.record_rounds(simulate_blocks([0.9, 0.8, 0.8, 0.7, 0.5, 0.5], 6, num_samples=5000, generator=gen(1)))
    s = log.summary()
    assert s.tokens_per_target_call == pytest.approx(1 + sum(s.reach), rel=1e-12)


def test_eos_truncation_breaks_the_identity_as_it_should():
    log = SpecDecodeLog(k=4)
    log.record_round(4, emitted=2)  # EOS inside the accepted prefix: only 2 tokens committed
    log.record_round(1)
    s = log.summary()
    assert s.tokens == 4 and s.tokens_per_target_call == 2.0
    assert 1 + sum(s.reach) == 3.5  # counts still describe acceptance
    log.record_round(0, emitted=0)
    assert log.summary().tokens == 4


def test_empty_log_and_unreached_positions_are_none_not_nan():
    s = SpecDecodeLog(k=2).summary()
    assert s.rounds == 0 and s.tokens == 0
    assert s.tokens_per_target_call is None and s.full_block_fraction is None and s.tokens_per_second is None
    assert s.conditional_acceptance == [None, None] and s.reach == [None, None]
    log = SpecDecodeLog(k=3)
    log.record_round(0)
    s = log.summary()
    assert s.blocks_reaching == [1, 0, 0] and s.conditional_acceptance == [0.0, None, None]
    assert s.reach == [0.0, 0.0, 0.0]
    assert s.tokens_per_second is None  # no time recorded
    assert "-" in str(log) and "nan" not in str(log).lower()


def test_k_zero_is_plain_decoding():
    log = SpecDecodeLog(k=0)
    log.record_round(0)
    s = log.summary()
    assert s.tokens_per_target_call == 1.0 and s.full_block_fraction == 1.0
    assert s.blocks_reaching == [] and s.conditional_acceptance == []
    with pytest.raises(ValueError, match="accepted"):
        log.record_round(1)


def test_record_rounds_equals_repeated_record_round():
    A = simulate_blocks(0.7, 5, num_samples=300, generator=gen(2))
    emitted = torch.minimum(A + 1, torch.full_like(A, 3))  # some rounds truncated
    one, many = SpecDecodeLog(k=5), SpecDecodeLog(k=5)
    for a, e in zip(A.tolist(), emitted.tolist()):
        one.record_round(a, emitted=e, verify_time=0.001)
    many.record_rounds(A, emitted=emitted, verify_time=0.3)
    s1, s2 = one.summary(), many.summary()
    assert dataclasses.replace(s1, verify_time=0.0, tokens_per_second=None) == \
        dataclasses.replace(s2, verify_time=0.0, tokens_per_second=None)
    assert s1.verify_time == pytest.approx(s2.verify_time)
    many.record_rounds(torch.tensor([], dtype=torch.long))  # an empty batch changes nothing
    assert many.summary().rounds == 300


def test_merge_equals_logging_everything_in_one_log():
    A = simulate_blocks(0.6, 4, num_samples=200, generator=gen(3)).tolist()
    whole, first, second = SpecDecodeLog(k=4), SpecDecodeLog(k=4), SpecDecodeLog(k=4)
    for i, a in enumerate(A):
        whole.record_round(a, draft_time=0.002, verify_time=0.001)
        (first if i < 70 else second).record_round(a, draft_time=0.002, verify_time=0.001)
    first.merge(second)
    assert dataclasses.replace(first.summary(), draft_time=0.0, verify_time=0.0, tokens_per_second=None) == \
        dataclasses.replace(whole.summary(), draft_time=0.0, verify_time=0.0, tokens_per_second=None)
    assert first.summary().draft_time == pytest.approx(whole.summary().draft_time)
    assert second.summary().rounds == 130  # the merged-in log is unchanged


@pytest.mark.parametrize("other, err, match", [
    (SpecDecodeLog(k=3), ValueError, "same"),
    (SpecDecodeLog(k=4, temperature=0.5), ValueError, "same"),
    ("log", TypeError, "SpecDecodeLog"),
])
def test_merge_rejects_a_different_log(other, err, match):
    log = SpecDecodeLog(k=4)
    with pytest.raises(err, match=match):
        log.merge(other)
    assert log.summary().rounds == 0


def test_log_matches_survivor_statistics_on_the_mixture():
    acc = simulate_mixture(betas=(0.95, 0.45), weights=(0.5, 0.5), k=4, num_samples=20_000, generator=gen(3))
    A = acc.long().cumprod(dim=1).sum(dim=1)  # accepted prefix only (not every passing flag)
    log = SpecDecodeLog(k=4)
    log.record_rounds(A)
    s, ref = log.summary(), survivor_statistics(acc)
    assert s.blocks_reaching == ref.blocks_reaching
    assert s.conditional_acceptance == ref.conditional_rate
    assert s.reach == ref.reach


@pytest.mark.stat
def test_conditional_acceptance_statistics_with_negative_control():
    n, k, alpha = 40_000, 6, 0.8
    log = SpecDecodeLog(k=k)
    log.record_rounds(simulate_blocks(alpha, k, num_samples=n, generator=gen(4)))
    s = log.summary()

    def within_5_sd(a_true):
        # conditional rate at j: mean of m_j = blocks_reaching[j] Bernoulli(alpha) flags, sd sqrt(a(1-a)/m_j)
        return all(abs(c - a_true) < 5 * math.sqrt(a_true * (1 - a_true) / m)
                   for c, m in zip(s.conditional_acceptance, s.blocks_reaching))

    assert within_5_sd(alpha)
    assert not within_5_sd(0.75)  # negative control: the wrong alpha fails the same check
    for r_hat, r in zip(s.reach, reach_probabilities(alpha, k)):
        assert abs(r_hat - r) < 5 * math.sqrt(r * (1 - r) / n)  # mean of n Bernoulli(r) indicators


def test_table_prints_denominators_beside_rates():
    log = SpecDecodeLog(k=2, policy="greedy", temperature=0.0, batch_size=16)
    for a in (2, 1, 0, 2):
        log.record_round(a, draft_time=0.5, verify_time=0.5)
    text = log.table()
    assert text == str(log) == str(log.summary())
    for needle in ("draft length k", "target verification rounds", "tokens per target call", "blocks reaching",
                   "conditional", "fully-accepted block fraction", "draft time", "verify time", "greedy",
                   "temperature", "batch size", "tokens per second"):
        assert needle in text
    lines = text.splitlines()
    assert lines[-2].split() == ["1", "4", "3", "0.750", "0.750"]
    assert lines[-1].split() == ["2", "3", "2", "0.667", "0.500"]


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(k=-1), ValueError, "k"),
    (dict(k=2.0), TypeError, "k"),
    (dict(k=True), TypeError, "k"),
    (dict(k=2, policy=3), TypeError, "policy"),
    (dict(k=2, policy=""), TypeError, "policy"),
    (dict(k=2, temperature=-0.5), ValueError, "temperature"),
    (dict(k=2, temperature=float("nan")), ValueError, "temperature"),
    (dict(k=2, batch_size=0), ValueError, "batch_size"),
    (dict(k=2, batch_size=1.5), TypeError, "batch_size"),
])
def test_bad_constructor(kwargs, err, match):
    with pytest.raises(err, match=match):
        SpecDecodeLog(**kwargs)


def test_constructor_is_keyword_only():
    with pytest.raises(TypeError):
        SpecDecodeLog(4)


@pytest.mark.parametrize("args, err, match", [
    (dict(accepted=4), ValueError, "accepted"),
    (dict(accepted=-1), ValueError, "accepted"),
    (dict(accepted=1.0), TypeError, "accepted"),
    (dict(accepted=1, emitted=3), ValueError, "emitted"),
    (dict(accepted=1, emitted=-1), ValueError, "emitted"),
    (dict(accepted=1, draft_time=-1.0), ValueError, "draft_time"),
    (dict(accepted=1, verify_time=float("nan")), ValueError, "verify_time"),
])
def test_bad_record_round_leaves_the_log_unchanged(args, err, match):
    log = SpecDecodeLog(k=3)
    with pytest.raises(err, match=match):
        log.record_round(**args)
    assert log.summary().rounds == 0 and log.summary().tokens == 0


def test_bad_record_rounds():
    log = SpecDecodeLog(k=3)
    with pytest.raises(TypeError, match="accepted"):
        log.record_rounds(torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="accepted"):
        log.record_rounds([1, 2])
    with pytest.raises(ValueError, match="accepted"):
        log.record_rounds(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="accepted"):
        log.record_rounds(torch.tensor([1, 4]))
    with pytest.raises(ValueError, match="accepted"):
        log.record_rounds(torch.tensor([1, -1]))
    with pytest.raises(ValueError, match="emitted"):
        log.record_rounds(torch.tensor([1, 2]), emitted=torch.tensor([2, 4]))
    with pytest.raises(ValueError, match="emitted"):
        log.record_rounds(torch.tensor([1, 2]), emitted=torch.tensor([2]))
    with pytest.raises(ValueError, match="draft_time"):
        log.record_rounds(torch.tensor([1, 2]), draft_time=-0.1)
    assert log.summary().rounds == 0
