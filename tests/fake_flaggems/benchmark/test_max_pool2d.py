"""max_pool2d: `get_input_iter` loops over a list written inside the method (upstream's
MaxPool2dBenchmark does the same); only its _bespoke_shape_plugin entry lets a yaml reach it.
var_dim builds its inputs from constants and is registered nowhere: the yaml cannot reach it
and the run must say so. torch ops on both sides: shapes are under test, not kernels."""
import pytest
import torch

from . import base


def max_pool2d_input_fn(shape, dtype, device):
    inp = torch.randn(shape, dtype=dtype, device=device)
    yield inp, {"kernel_size": 3, "stride": 2, "padding": 1}


class MaxPool2dBenchmark(base.GenericBenchmark):
    def get_input_iter(self, dtype):
        shapes_4d = [
            (1, 2, 8, 8),
            (2, 2, 6, 6),
        ]
        for shape in shapes_4d:
            yield from self.input_fn(shape, dtype, self.device)


@pytest.mark.max_pool2d
def test_max_pool2d():
    bench = MaxPool2dBenchmark(input_fn=max_pool2d_input_fn, op_name="max_pool2d",
                               torch_op=torch.nn.functional.max_pool2d, dtypes=[torch.float32],
                               gems_op=torch.nn.functional.max_pool2d)
    bench.run()


class VarDimBenchmark(base.Benchmark):
    def get_input_iter(self, dtype):
        for rows in range(2, 4):
            yield torch.randn((rows, 16), dtype=dtype, device=self.device), 1


@pytest.mark.var_dim
def test_var_dim():
    bench = VarDimBenchmark(op_name="var_dim", torch_op=torch.var, dtypes=[torch.float32],
                            gems_op=torch.var)
    bench.run()
