"""The decode graphs' static inputs: one packed device tensor per dtype, filled from a host
mirror in one copy each.

A captured graph reads fixed addresses, so every input of a decode step (token ids,
positions, slots: int64; block tables, lengths, group indptr, prefix tables and lengths:
int32) is a fixed view of one packed tensor per dtype. A step writes the host mirror's numpy views
(pinned memory on CUDA) and `upload` copies each packed tensor once: two host-to-device
copies per step instead of one per buffer, and no Python list-of-lists -> tensor conversion.
The copies are blocking: a later fill never overwrites host memory a pending copy still reads.
"""

from __future__ import annotations

import numpy as np
import torch

INT64_BUFFERS = ("input_ids", "positions", "slots")
ALIGN_BYTES = 16


def _layout(max_batch: int, max_width: int) -> dict[str, tuple[int, ...]]:
    b, w = max_batch, max_width
    return {"tables": (b, w), "prefix_tables": (b, w), "seq_lens": (b,), "indptr": (b + 1,),
            "prefix_lens": (b,)}


class StaticInputs:
    def __init__(self, max_batch: int, max_width: int, device: torch.device) -> None:
        pin = device.type == "cuda"
        shapes64 = {name: (max_batch,) for name in INT64_BUFFERS}
        shapes32 = _layout(max_batch, max_width)
        self.views: dict[str, torch.Tensor] = {}     # device views, fixed addresses
        self.host: dict[str, np.ndarray] = {}        # the host mirror's views
        self._packed: list[tuple[torch.Tensor, torch.Tensor]] = []
        for dtype, shapes in ((torch.int64, shapes64), (torch.int32, shapes32)):
            # Every view starts on a 16-byte boundary, as a tensor of its own does: Triton
            # specialises a pointer argument on 16-byte alignment, so an unaligned view would
            # make the graph's kernels a different compilation from the eager step's (the
            # warm-up compiles one; the other would JIT while serving).
            align = ALIGN_BYTES // dtype.itemsize
            offsets, total = {}, 0
            for name, shape in shapes.items():
                offsets[name] = total
                total += -(-int(np.prod(shape)) // align) * align
            dev = torch.zeros(total, dtype=dtype, device=device)
            host = torch.zeros(total, dtype=dtype, pin_memory=pin)
            self._packed.append((dev, host))
            flat = host.numpy()
            for name, shape in shapes.items():
                offset, n = offsets[name], int(np.prod(shape))
                self.views[name] = dev[offset:offset + n].view(shape)
                self.host[name] = flat[offset:offset + n].reshape(shape)

    def upload(self) -> None:
        for dev, host in self._packed:
            dev.copy_(host)

    @staticmethod
    def write_rows(dst: np.ndarray, tables: list[list[int]]) -> None:
        """Each table into its row of dst; columns past a row's own are never read."""
        for r, table in enumerate(tables):
            dst[r, :len(table)] = table
