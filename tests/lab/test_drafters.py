"""The lab's drafters: the n-gram table against a slow reference, prompt lookup's match rule, proposals and q,
and the lab's acceptance test against the core's verify_batch, verify_batch_block and greedy_one, draw for draw."""
import random

import pytest
import torch

import specdec_lib as sd
from specdec_lib.block_verification import verify_batch_block
from specdec_lib.lab.accept import verify_block_logits
from specdec_lib.lab.drafters import NeuralDraft, as_drafter
from specdec_lib.lab.steps import policy_probs
from specdec_lib.lab.transformer import CachedLM, LMConfig
from specdec_lib.verification import greedy_one, verify_batch

# --- the n-gram table -------------------------------------------------------------------------------------

def slow_next_token(data: list[int], vocab: int, order: int, context: list[int], tie: int = -1) -> int:
    """Reference: count every (context, next) pair in pure Python; most frequent, ties to the smallest id
    (tie=+1: to the largest, a wrong rule); a context never seen backs off to its latest c - 1 tokens."""
    for c in range(min(order - 1, len(context)), -1, -1):
        ctx = tuple(context[len(context) - c:])
        counts = [0] * vocab
        for t in range(c, len(data)):
            if tuple(data[t - c:t]) == ctx:
                counts[data[t]] += 1
        if sum(counts):
            return max(range(vocab), key=lambda v: (counts[v], tie * v))
    raise AssertionError("the unigram always has counts")


def test_ngram_equals_the_slow_reference_on_every_context():
    g = torch.Generator().manual_seed(0)
    V, order = 5, 3
    data = torch.randint(0, V, (60,), generator=g)
    data[:12] = torch.tensor([0, 1, 0, 2, 0, 1, 0, 2, 3, 3, 3, 3])  # 0 -> 1 and 0 -> 2 tie: ties matter
    table = sd.lab.build_ngram(data, V, order)
    seq = data.tolist()
    assert [len(t) for t in table.tables] == [1, V, V * V]
    unseen = tied = 0
    for c in range(order):
        for code in range(V ** c):
            ctx = [(code // V ** (c - 1 - i)) % V for i in range(c)]
            assert table.next_token(ctx) == table.tables[c][code] == slow_next_token(seq, V, order, ctx), ctx
            unseen += c == 2 and all(tuple(seq[t - 2:t]) != tuple(ctx) for t in range(2, len(seq)))
            tied += table.next_token(ctx) != slow_next_token(seq, V, order, ctx, tie=+1)
    assert unseen > 0  # the backoff branch was exercised
    assert tied > 0  # negative control: the wrong tie rule disagrees with the table somewhere


def test_ngram_on_bytes_against_the_reference():
    text = list(b"def f(x):\n    return x + 1\n\ndef g(y):\n    return f(y) * 2\n")
    table = sd.lab.build_ngram(torch.tensor(text), 256, 3)
    rng = random.Random(1)
    contexts = [text[i - c:i] for i in range(2, len(text)) for c in (0, 1, 2)] + [[rng.randrange(256)] * 2
                                                                                    for _ in range(20)]
    for ctx in contexts:
        assert table.next_token(ctx) == slow_next_token(text, 256, 3, ctx), bytes(ctx)


@pytest.mark.parametrize("kwargs, err, match", [
    ({"data": torch.tensor([1, 2]), "vocab": 4, "order": 3}, ValueError, "at least order"),
    ({"data": torch.tensor([1, 7]), "vocab": 4, "order": 1}, ValueError, r"token ids in \[0, 4\)"),
    ({"data": torch.tensor([1.0, 2.0]), "vocab": 4, "order": 1}, TypeError, "data"),
    ({"data": torch.tensor([1, 2, 3, 4, 5]), "vocab": 256, "order": 5}, ValueError, "lower order"),
    ({"data": torch.tensor([1, 2]), "vocab": 4, "order": 0}, ValueError, "order"),
])
def test_build_ngram_rejects_bad_input(kwargs, err, match):
    with pytest.raises(err, match=match):
        sd.lab.build_ngram(**kwargs)


# --- proposals and q --------------------------------------------------------------------------------------

GREEDY = {"temperature": 0.0, "top_k": None, "generator": None}
SAMPLE = {"temperature": 1.0, "top_k": None, "generator": None}


def _propose(drafter, text: bytes, k: int, policy=GREEDY):
    seq = torch.tensor(list(text))
    return drafter.propose(drafter.start(seq), seq, len(text), k, **policy)


def test_table_draft_chains_its_own_lookups_and_q_is_one_hot():
    data = torch.tensor(list(b"abcabcabdabc" * 3))
    table = sd.lab.build_ngram(data, 256, 3)
    drafter = sd.lab.TableDraft(table)
    proposals, q = _propose(drafter, b"xab", 5)
    assert q is None
    ctx, want = list(b"xab"), []
    for _ in range(5):
        want.append(table.next_token(ctx))
        ctx.append(want[-1])
    assert proposals.tolist() == want and bytes(want) == b"cabca"
    proposals, q = _propose(drafter, b"xab", 5, SAMPLE)
    assert q.shape == (5, 256) and torch.equal(q.argmax(-1), proposals) and torch.equal(q.sum(-1), torch.ones(5))


@pytest.mark.parametrize("text, m, want", [
    (b"abcXabc", 3, b"Xabc" + b"X"),  # the full suffix matched at 0, continuation copied
    (b"ab1ab2ab", 2, b"2ab2a"),  # the latest earlier match wins (at 3, not 0)
    (b"xyzxy", 2, b"zxyzx"),  # a continuation that reaches the end repeats with period n - i - len
    (b"abab", 2, b"ababa"),
    (b"abcd", 3, b"ddddd"),  # the last token never occurred before: repeat it
    (b"aXbYa", 3, b"XbYaX"),  # only a 1-token suffix matches: backoff to the shortest length
])
def test_prompt_lookup_match_rule(text, m, want):
    proposals, _ = _propose(sd.lab.PromptLookupDraft(256, m=m), text, 5)
    assert bytes(proposals.tolist()) == want


def test_one_hot_drafts_read_only_committed_tokens():
    drafter = sd.lab.PromptLookupDraft(256, m=2)
    seq = torch.tensor(list(b"abXab") + [0] * 4)  # junk after n = 5 must never be read
    state = drafter.start(seq[:1])
    assert bytes(drafter.propose(state, seq, 5, 3, **GREEDY)[0].tolist()) == b"Xab"
    assert bytes(state) == b"abXab"
    drafter.rollback(state, 5)
    assert bytes(state) == b"abXab"


def test_drafter_arguments():
    with pytest.raises(TypeError, match="table must be an NGramTable"):
        sd.lab.TableDraft({})
    assert sd.lab.PromptLookupDraft(1000).start(None) == []  # a tokenizer's vocabulary: the state is a list of ints
    with pytest.raises(ValueError, match="vocab"):
        sd.lab.PromptLookupDraft(1)
    with pytest.raises(ValueError, match="m"):
        sd.lab.PromptLookupDraft(256, m=0)
    with pytest.raises(TypeError, match="draft must be a drafter"):
        as_drafter("draft")
    model = CachedLM(LMConfig(vocab=8, d_model=8, n_head=1, n_layer=1, max_len=16))
    assert isinstance(as_drafter(model), NeuralDraft) and as_drafter(model).vocab == 8


# --- the hot-path acceptance test ---------------------------------------------------------------------------

def _case(g, k, V, one_hot, peaked):
    logits = torch.randn(k + 1, V, generator=g) * (4.0 if peaked else 1.0)  # (k+1, V)
    q = torch.softmax(torch.randn(k, V, generator=g) * 2, -1)  # (k, V)
    proposals = torch.multinomial(q, 1, generator=g)[:, 0]  # (k,)
    if one_hot:
        q = torch.zeros(k, V).scatter_(1, proposals[:, None], 1.0)
    return logits, q, proposals


@pytest.mark.heavy
@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("policy", [{"temperature": 1.0, "top_k": None}, {"temperature": 0.7, "top_k": 3}])
def test_verify_block_logits_draws_what_verify_batch_draws(one_hot, policy):
    g = torch.Generator().manual_seed(7)
    outcomes = set()
    for trial in range(300):
        k, V = 1 + trial % 5, 6
        logits, q, proposals = _case(g, k, V, one_hot, peaked=trial % 2 == 0)
        g1, g2 = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
        test = verify_block_logits(logits, proposals, q, generator=g1, one_hot=one_hot, **policy)
        a, nxt = test.accepted, test.next_token
        p = policy_probs(logits, policy["temperature"], policy["top_k"])
        acc, ref = verify_batch(p[None], q[None], proposals[None], g2)
        assert (a, int(nxt)) == (int(acc[0]), int(ref[0])), trial
        assert torch.rand(1, generator=g1) == torch.rand(1, generator=g2)  # the same number of draws
        outcomes.add(a == k)
    assert outcomes == {True, False}  # both branches: a rejection's residual and the bonus row


@pytest.mark.heavy
@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("policy", [{"temperature": 1.0, "top_k": None}, {"temperature": 0.7, "top_k": 3}])
def test_verify_block_logits_block_method_draws_what_verify_batch_block_draws(one_hot, policy):
    g = torch.Generator().manual_seed(8)
    outcomes, differ = set(), 0
    for trial in range(300):
        k, V = 1 + trial % 5, 6
        logits, q, proposals = _case(g, k, V, one_hot, peaked=trial % 2 == 0)
        g1, g2 = torch.Generator().manual_seed(trial), torch.Generator().manual_seed(trial)
        q_in = None if one_hot and trial % 3 == 0 else q  # a one-hot draft's q is built from the proposals
        test = verify_block_logits(logits, proposals, q_in, generator=g1, one_hot=one_hot, method="block", **policy)
        p = policy_probs(logits, policy["temperature"], policy["top_k"]).double()
        acc, ref = verify_batch_block(p[None], q.double()[None], proposals[None], g2)
        assert (test.accepted, int(test.next_token)) == (int(acc[0]), int(ref[0])), trial
        assert torch.rand(1, generator=g1) == torch.rand(1, generator=g2)  # the same number of draws
        outcomes.add(test.accepted == k)
        g3 = torch.Generator().manual_seed(trial)  # the same uniforms under the token rule
        token = verify_block_logits(logits, proposals, q, generator=g3, one_hot=one_hot, **policy)
        differ += (test.accepted, int(test.next_token)) != (token.accepted, int(token.next_token))
    assert outcomes == {True, False}  # both branches: a stop before the end (residual) and a full block (bonus)
    assert differ > 0  # negative control: the token rule, on the same uniforms, fails the comparison above


@pytest.mark.parametrize("method", ["token", "block"])
def test_verify_block_logits_greedy_is_greedy_one(method):
    """A greedy target makes block verification the token rule: under either method the lab is greedy_one."""
    g = torch.Generator().manual_seed(3)
    logits, proposals = torch.randn(40, 7, 3, generator=g), torch.randint(0, 3, (40, 6), generator=g)  # V = 3
    kept = set()
    for lg, x in zip(logits, proposals):
        got = verify_block_logits(lg, x, None, temperature=0.0, top_k=None, generator=None, method=method)
        assert (got.accepted, int(got.next_token)) == tuple(map(int, greedy_one(lg, x)))
        kept.add(got.accepted)
    assert len(kept) >= 3  # rejections at several positions


def test_verify_block_logits_validation():
    g = torch.Generator().manual_seed(0)
    logits, q, proposals = _case(g, 2, 4, one_hot=False, peaked=False)  # (3, 4), (2, 4), (2,)
    sampled = {"temperature": 1.0, "top_k": None, "generator": torch.Generator().manual_seed(1)}
    cases = [  # (arguments, keywords, error, message)
        ((logits, proposals, None), sampled, ValueError, r"q_rows \(k, V\).*is required unless temperature == 0 or "
                                                          r"one_hot=True; got None"),
        ((logits, proposals, q[:1]), sampled, ValueError, r"q_rows must be \(k, V\) = \(2, 4\)"),
        ((logits, proposals, q.tolist()), sampled, TypeError, "q_rows must be a torch.Tensor, got list"),
        ((logits, proposals[:1], q), sampled, ValueError, r"proposals must be \(k,\) with k \+ 1 = 3 rows"),
        ((logits, proposals.double(), q), sampled, TypeError, "proposals must be an integer tensor"),
        ((logits.tolist(), proposals, q), sampled, TypeError, "p_logits must be a torch.Tensor"),
        ((logits[0], proposals, q), sampled, ValueError, r"p_logits must be \(k\+1, V\)"),
        ((logits, proposals, q), {**sampled, "temperature": -1.0}, ValueError, "temperature must lie in"),
        ((logits, proposals, q), {**sampled, "top_k": 0}, ValueError, "top_k must be >= 1"),
        ((logits, proposals, q), {**sampled, "generator": 3}, TypeError, "generator must be a torch.Generator"),
        ((logits, proposals, q), {**sampled, "method": "blocks"}, ValueError,
         "method must be one of 'token', 'block'; got 'blocks'"),
        ((logits, proposals, None), {**sampled, "method": "block"}, ValueError, r"q_rows \(k, V\).*is required"),
    ]
    for args, kwargs, exc, match in cases:
        with pytest.raises(exc, match=match):
            verify_block_logits(*args, **kwargs)
    # q_rows=None stays valid where q is never read: greedy, and one-hot drafts (the residual is p minus x)
    verify_block_logits(logits, proposals, None, temperature=0.0, top_k=None, generator=None)
    verify_block_logits(logits, proposals, None, one_hot=True, **sampled)
    assert verify_block_logits(logits[:1], proposals[:0], q[:0], **sampled).accepted == 0  # k = 0: the bonus alone
    assert verify_block_logits(logits[:1], proposals[:0], q[:0], **sampled, method="block").accepted == 0
    verify_block_logits(logits, proposals, None, one_hot=True, method="block", **sampled)
