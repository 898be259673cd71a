"""Allocator-level memory data: PyTorch/CuPy recorders, the allocator-event table, and
allocator models for what-if replay."""
