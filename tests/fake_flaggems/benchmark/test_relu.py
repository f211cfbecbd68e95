import pytest
import torch

from . import base, consts


@pytest.mark.relu
def test_relu():
    # ZL_TEST_SWITCH=1 changes the relu kernel body (see flag_gems/ops/relu.py):
    # the A/B drivers' switch tests compare a run with it against one without.
    bench = base.UnaryPointwiseBenchmark(
        op_name="relu", torch_op=torch.relu, dtypes=[torch.float16, torch.float32]
    )
    bench.run()
