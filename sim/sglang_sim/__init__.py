"""SGLang 0.5.23-compatible engine simulator for machines without a GPU."""

SGLANG_VERSION = "0.5.23"  # the engine version the simulator reports and imitates
