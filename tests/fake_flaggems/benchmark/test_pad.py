"""pad: `set_shapes` assigns literal shapes and never reads the yaml (about 200 upstream
classes do this, e.g. attention and MoE); _shape_inject_plugin replaces them afterwards."""
import pytest
import torch

from . import base


def pad_input_fn(shape, dtype, device):
    yield torch.randn(shape, dtype=dtype, device=device), [1, 1]


class PadBenchmark(base.GenericBenchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [(4, 8), (8, 16)]


@pytest.mark.pad
def test_pad():
    bench = PadBenchmark(input_fn=pad_input_fn, op_name="pad", torch_op=torch.nn.functional.pad,
                         dtypes=[torch.float32], gems_op=torch.nn.functional.pad)
    bench.run()
