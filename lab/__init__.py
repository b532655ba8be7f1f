"""The lab: studies, probes and the suite's kernels' variants. It imports the suite and the plugin, never the reverse:
nothing in perftests/, plugin/ or tests/ imports it.

A probe times the suite's kernels as the suite's runs assemble them: importing the lab settles, on a process that
sees a GPU, the ptxas and the binaries' folder a run of the suite settles at its first test
(speedgate.toolchain.settle_for_visible_gpu), so that a probe's Triton kernels are the binaries the gate times, and
none of its binaries is handed to a run under another ptxas through Triton's shared cache."""

from speedgate.toolchain import settle_for_visible_gpu

settle_for_visible_gpu()
