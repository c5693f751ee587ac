"""The KV cache tensors: the memory they may take, allocation, and block copies for forks
(how many blocks: sizing.py).

One tensor [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]; layer i's K and V
caches are views of it with the kernels' layout [num_blocks, block_size, num_kv_heads, head_dim].
With `scratch_block`, one more block (index num_blocks, never handed out by the block manager)
takes the K/V writes of the padding rows of a CUDA-graph batch (graphs.py).
"""

from __future__ import annotations

import torch

from parrot.engines.builtin.llama.shapes import ModelShape


def available_bytes(device: torch.device) -> int:
    """Memory a KV cache may take: free GPU memory on CUDA, MemAvailable on the CPU (read after
    the weights are loaded; sizing.py takes a fraction of it)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read MemAvailable from /proc/meminfo")


class KVCache:
    def __init__(self, shape: ModelShape, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device, *, scratch_block: bool = False) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.scratch_block: int | None = num_blocks if scratch_block else None
        total = num_blocks + int(scratch_block)
        self.data = torch.zeros(shape.num_layers, 2, total, block_size, shape.num_kv_heads,
                                shape.head_dim, dtype=dtype, device=device)
        self.layers = [(self.data[i, 0], self.data[i, 1]) for i in range(shape.num_layers)]

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy block src -> dst in every layer, in list order (a later copy may read an
        earlier one's destination: a fork of a fork before either ran)."""
        for src, dst in pairs:
            self.data[:, :, dst] = self.data[:, :, src]
