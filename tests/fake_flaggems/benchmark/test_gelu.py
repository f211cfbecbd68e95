import pytest
import torch

from . import base, consts


@pytest.mark.gelu_backward
def test_gelu_backward():
    # gems side: aten::gelu_backward -> a libentry + libtuner kernel (sqlite-cached picks).
    bench = base.UnaryPointwiseBenchmark(
        op_name="gelu_backward",
        torch_op=torch.nn.functional.gelu,
        dtypes=[torch.float32],
        is_backward=True,
    )
    bench.run()
