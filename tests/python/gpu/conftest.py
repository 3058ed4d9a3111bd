# The scripts in this folder are torchrun programs for a host with GPUs (see README.md),
# not pytest modules: pytest run over tests/python must not collect them.
collect_ignore_glob = ["*.py"]
