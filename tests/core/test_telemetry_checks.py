"""telemetry.emitted_until_eos validates its inputs, naming the argument."""
import pytest
import torch

from specdec_lib.telemetry import emitted_until_eos


def test_emitted_until_eos_validates():
    tokens = torch.tensor([[3, 0, 2], [1, 2, -1]])
    assert emitted_until_eos(tokens, torch.tensor([2, 1]), eos=0).tolist() == [2, 2]
    with pytest.raises(TypeError, match="tokens"):
        emitted_until_eos(tokens.double(), torch.tensor([2, 1]), eos=0)
    with pytest.raises(TypeError, match="accepted"):
        emitted_until_eos(tokens, torch.tensor([2]), eos=0)
    with pytest.raises(ValueError, match="accepted must lie in 0..k"):
        emitted_until_eos(tokens, torch.tensor([3, 1]), eos=0)
    with pytest.raises(ValueError, match="eos"):
        emitted_until_eos(tokens, torch.tensor([2, 1]), eos=-1)
