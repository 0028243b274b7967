"""``intra_op_threads``: torch's thread count for a block, the caller's given back however the block ends."""

from __future__ import annotations

import pytest
import torch

from naspipe.lifecycle.threads import intra_op_threads


def test_the_callers_thread_count_comes_back_after_the_block_and_after_an_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with intra_op_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="user code"), intra_op_threads(1):
            raise RuntimeError("user code")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
