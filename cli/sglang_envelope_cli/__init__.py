"""The operator's command line over the envelope core: `sglang-envelope capacity | plan | check-request |
monitoring | bench`."""
