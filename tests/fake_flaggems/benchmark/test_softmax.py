import pytest
import torch

from . import base, consts


@pytest.mark.softmax
def test_softmax():
    bench = base.UnaryReductionBenchmark(
        op_name="softmax",
        torch_op=torch.nn.functional.softmax,
        dtypes=[torch.float16, torch.float32],
    )
    bench.run()
