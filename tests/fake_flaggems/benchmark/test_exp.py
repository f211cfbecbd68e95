import pytest
import torch

import flag_gems

# Deliberately ungated import of another vendor's package, the shape of a real
# upstream bug (a Hopper-only module imported on every vendor). On the default
# nvidia vendor this loads `_mthreads`, which FOREIGN_VENDOR_MODULE must report.
from flag_gems.runtime.backend import _mthreads  # noqa: F401

from . import base, consts


@pytest.mark.exp
def test_exp():
    bench = base.UnaryPointwiseBenchmark(
        op_name="exp", torch_op=torch.exp, dtypes=[torch.float32], gems_op=flag_gems.exp
    )
    bench.run()
