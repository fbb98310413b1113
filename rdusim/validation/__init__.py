"""The model against the public evidence: every published SN40L figure as an item with its source
and what the source leaves unstated (`evidence/`), calibration as inference over them, leave-one-out
validation beside null models that know nothing of the machine, and the SnapStream paper's tables.

Published numbers live in `validation/evidence/` and enter only here: as the data a posterior is
fitted to, and as the column predictions are compared with.
"""
