"""The calibration's fixed settings, apart from its code so the command line reads them without
importing the sampler."""

SEED = 20251105  # the SnapStream paper's arXiv date: any fixed seed would do
DRAWS = 512  # parameter sets the importance weights price exactly
MEMBERS = 64  # parameter sets in the shipped ensemble
