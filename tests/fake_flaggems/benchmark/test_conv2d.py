"""conv2d_padding: `get_input_iter` loops over the class-level DEFAULT_SHAPES, not
`self.shapes` (upstream's Conv2DPaddingBenchmark does the same), so only
_shape_iter_inject_plugin lets a yaml reach it. torch's conv2d runs on both sides:
these benchmarks exercise where shapes come from, not a kernel."""
import pytest
import torch

from . import base


def conv2d_input_fn(shape, dtype, device):
    batch, c_in, h, w, c_out, k_h, k_w, stride, padding, groups = shape
    inp = torch.randn((batch, c_in, h, w), dtype=dtype, device=device)
    weight = torch.randn((c_out, c_in // groups, k_h, k_w), dtype=dtype, device=device)
    yield {"input": inp, "weight": weight, "bias": None, "groups": groups,
           "stride": stride, "padding": padding},


class Conv2DPaddingBenchmark(base.GenericBenchmark):
    DEFAULT_SHAPES = [
        (1, 2, 6, 6, 2, 3, 3, 1, "valid", 1),
        (1, 2, 8, 8, 4, 3, 3, 1, "same", 1),
    ]

    def set_more_shapes(self):
        return []

    def get_input_iter(self, dtype):
        for shape in self.DEFAULT_SHAPES:
            yield from self.input_fn(shape, dtype, self.device)


@pytest.mark.conv2d_padding
def test_conv2d_padding():
    bench = Conv2DPaddingBenchmark(input_fn=conv2d_input_fn, op_name="conv2d_padding",
                                   torch_op=torch.nn.functional.conv2d, dtypes=[torch.float32],
                                   gems_op=torch.nn.functional.conv2d)
    bench.run()
