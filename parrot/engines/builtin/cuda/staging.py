"""The decode graphs' static inputs: one packed device tensor per dtype, filled from a host
mirror in one copy each; and `upload_packed`, an eager step's inputs of one dtype in one copy.

A captured graph reads fixed addresses, so every input of a decode step (token ids,
positions, slots: int64; block tables, lengths, group indptr, prefix tables and lengths:
int32) is a fixed view of one packed tensor per dtype. A step writes the host mirror's numpy views
(pinned memory on CUDA) and `upload` copies each packed tensor once: two host-to-device
copies per step instead of one per buffer, and no Python list-of-lists -> tensor conversion.

The copies do not block the host: a step can be staged while the GPU still runs the one
before it (launch-ahead, lookahead.py). So there are two host mirrors, used in turn: `upload`
queues the copies from the current one, records an event behind them and switches to the
other, first waiting for that one's own last copies (queued a step earlier, so in practice
long done). A fill therefore never overwrites host memory a pending copy still reads.
"""

from __future__ import annotations

import numpy as np
import torch

INT64_BUFFERS = ("input_ids", "positions", "slots")
ALIGN_BYTES = 16


def aligned_offsets(sizes: list[int], itemsize: int) -> tuple[list[int], int]:
    """(offset of each of `sizes` elements, total elements) packed one after another, each
    starting on an ALIGN_BYTES boundary, as a tensor of its own does: Triton specialises a
    pointer argument on 16-byte alignment, so an unaligned view would make a kernel a
    different compilation (the warm-up compiles one; the other would JIT while serving)."""
    align = ALIGN_BYTES // itemsize
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += -(-size // align) * align
    return offsets, total


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
        self._mirrors: list[dict[str, np.ndarray]] = [{}, {}]   # two host mirrors' views
        self._packed: list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []
        self._events = [torch.cuda.Event() if pin else None for _ in range(2)]
        self._current = 0
        for dtype, shapes in ((torch.int64, shapes64), (torch.int32, shapes32)):
            sizes = [int(np.prod(shape)) for shape in shapes.values()]
            offsets, total = aligned_offsets(sizes, dtype.itemsize)
            dev = torch.zeros(total, dtype=dtype, device=device)
            hosts = (torch.zeros(total, dtype=dtype, pin_memory=pin),
                     torch.zeros(total, dtype=dtype, pin_memory=pin))
            self._packed.append((dev, hosts))
            for (name, shape), offset, n in zip(shapes.items(), offsets, sizes):
                self.views[name] = dev[offset:offset + n].view(shape)
                for mirror, host in zip(self._mirrors, hosts):
                    mirror[name] = host.numpy()[offset:offset + n].reshape(shape)

    @property
    def host(self) -> dict[str, np.ndarray]:
        """The views of the host mirror the next `upload` copies (free to write now)."""
        return self._mirrors[self._current]

    def upload(self) -> None:
        """Queue the copies of the current mirror to the device; switch mirrors."""
        for dev, hosts in self._packed:
            dev.copy_(hosts[self._current], non_blocking=True)
        event = self._events[self._current]
        if event is not None:
            event.record()
        self._current ^= 1
        event = self._events[self._current]
        if event is not None:
            event.synchronize()     # that mirror's last copies have run: it may be written

    @staticmethod
    def write_rows(dst: np.ndarray, tables: list[list[int]]) -> None:
        """Each table into its row of dst; columns past a row's own are never read."""
        for r, table in enumerate(tables):
            dst[r, :len(table)] = table


def upload_packed(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Host arrays of one dtype as device tensors of their shapes: views of one packed tensor
    made by one copy, each on a 16-byte boundary (aligned_offsets).

    An eager step's inputs (token ids, positions, slots; block tables, lengths, group
    pointers) are a handful of arrays; one `torch.tensor(list, device=...)` each is a list
    conversion and a blocking copy apiece, with the GPU idle in between."""
    dtype = arrays[0].dtype
    if any(a.dtype != dtype for a in arrays):
        raise ValueError(f"upload_packed: one dtype per upload, got "
                         f"{sorted({str(a.dtype) for a in arrays})}")
    offsets, total = aligned_offsets([a.size for a in arrays], dtype.itemsize)
    flat = np.zeros(max(1, total), dtype=dtype)
    for a, offset in zip(arrays, offsets):
        flat[offset:offset + a.size] = a.reshape(-1)
    packed = torch.from_numpy(flat).to(device, non_blocking=True)
    return [packed[offset:offset + a.size].view(a.shape) for a, offset in zip(arrays, offsets)]
