import pytest
import torch

from . import base, consts


@pytest.mark.abs
def test_abs():
    # float32 only: `--dtypes float16` raises upstream's "Given dtype(s) ..." ValueError.
    bench = base.UnaryPointwiseBenchmark(op_name="abs", torch_op=torch.abs, dtypes=[torch.float32])
    bench.run()
