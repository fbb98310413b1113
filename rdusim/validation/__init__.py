"""Comparison with published SN40L figures: the SnapStream paper's tables, other published facts,
null models that say how much a match means, and the calibration that fits the few parameters.

Published numbers live in `rdusim/data/` and enter only here, as the column simulated figures are
compared against, or as the targets of `rdusim calibrate`.
"""
