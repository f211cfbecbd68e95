def size_in_bytes(tensor):
    """Bytes a tensor occupies (numel * element size); 0 for non-tensors."""
    if not hasattr(tensor, "element_size"):
        return 0
    return tensor.numel() * tensor.element_size()
