from . import shape_utils  # noqa: F401
