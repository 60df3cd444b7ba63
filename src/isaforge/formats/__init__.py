"""Model file readers and writers."""

from isaforge.formats.llama2c import (
    detect_format,
    read_llama2c,
    v2_tensor_specs,
    v2_tensors_of,
    write_llama2c_v1,
    write_llama2c_v2,
)

__all__ = [
    "detect_format",
    "read_llama2c",
    "v2_tensor_specs",
    "v2_tensors_of",
    "write_llama2c_v1",
    "write_llama2c_v2",
]
