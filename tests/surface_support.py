"""Shared by tests/surface: the small history-dependent chains the loop's tests run on, and one thread for them
(each file: `one_thread = pytest.fixture(autouse=True, scope="module")(single_thread)`)."""
import torch

V, EOS, PROMPT = 5, 4, (0, 2)


class Chain:
    """logits = table[last `order` tokens] (a context-tuple -> logits (V,) model)."""

    def __init__(self, order: int, seed: int, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        self.order = order
        self.table = torch.randn((V,) * order + (V,), generator=g, dtype=torch.float64) * scale

    def __call__(self, ctx):
        return self.table[tuple(ctx[-self.order:])]


TARGET, DRAFT = Chain(2, 0), Chain(1, 1)


def single_thread():
    """Tiny tensors: one thread is fastest, and a loaded machine's thread pool can be 30x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
