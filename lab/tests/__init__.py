"""The lab's own tests (CPU): its probes' plumbing and its variant kernels, through the interpreter or compiled for
sm_90 without a GPU."""
