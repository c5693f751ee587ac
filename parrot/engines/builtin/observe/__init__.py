"""What the engine tells about itself: start-up phases and its speed probe, per-step
accounting and traces, Triton compilations and garbage-collection pauses."""
