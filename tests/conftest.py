"""Suite-wide setup. Triton kernels run in the interpreter when there is no GPU; the variable
must be set before triton is first imported anywhere in the process."""

import os

try:
    import torch

    _has_cuda = torch.cuda.is_available()
except ImportError:  # the manager's tests need no torch
    _has_cuda = False

if not _has_cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")
