"""The LLaMA network: weights loaded, layers, rope, attention dispatched to the kernels, and
the small-batch linear choice."""
