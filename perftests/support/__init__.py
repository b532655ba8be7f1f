"""What the test modules (and the lab) share that is neither a kernel nor a model: timing of compiles, the compiled
reference, tolerances, workloads a tool re-runs, and the bodies of the multi-GPU cases that run inside ranks."""
