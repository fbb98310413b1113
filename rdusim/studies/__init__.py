"""Studies: many runs of the Python API, gathered into one answer.

A sweep runs a mapping over a grid of `--set` values (`sweep`), on local processes or a
dask.distributed cluster (`executors`); the paper's reproduction computes the SnapStream paper's
Tables 4 and 5 and its text's figures from the shipped mappings, beside the published evidence
(`paper`). Both call `rdusim.api`, so they sit above it, and above `rdusim.serving`,
`rdusim.report` and `rdusim.validation`: only the command line imports them.
"""
