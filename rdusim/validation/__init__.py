"""The model against the public evidence: every published SN40L figure as an item with its source
and what the source leaves unstated (`evidence/`), calibration as inference over them, and
leave-one-out validation beside null models that know nothing of the machine.

Published numbers live in `validation/evidence/` and enter only through here: as the data a
posterior is fitted to, and as the column predictions are compared with (the SnapStream paper's
tables in `rdusim.studies.paper` read them from `items.shipped_evidence`).
"""
