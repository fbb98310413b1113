"""What rdusim is unsure of, and how sure each number it prints is.

The timing parameters no datasheet fixes (compute and HBM efficiencies, link bandwidth and
latency, the parts of a kernel call, usable HBM) are known only as a posterior: a seeded ensemble
of parameter sets that `rdusim calibrate --write` draws from the evidence (`rdusim.validation`)
and ships as package data. This package applies that ensemble to any hardware, prices a compiled
program under each member with the closed-form cost model anchored to the simulator, and turns
the spread into intervals and into what each number rests on.
"""
