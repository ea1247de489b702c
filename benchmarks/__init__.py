"""deltaflow's benchmark suite: verify each workload's result, then measure it beside its floors and peers.

Run ``python -m benchmarks --help``. Benchmarks are not tests: nothing here
asserts a time; targets are reported as met or not met with the figures.
"""
