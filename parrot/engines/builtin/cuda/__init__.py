"""The GPU fast path: CUDA graphs for decode and prefill steps, their static inputs,
launch-ahead, the warm-up, and one engine at a time per GPU."""
