"""The auto-mapper: searching fusion, sharding, tiling and kernel looping for a mapping.

`kernels: auto` in a mapping (or `--set kernels=auto`) hands the mapping's kernels to
`mapper.auto_map`, which searches each layer kind on its own and then whole mappings:

- `space`: the sharding plans tried for a layer kind (where attention and experts go);
- `segments`: one candidate kernel, a contiguous run of ops under a plan, compiled by the
  compiler's own passes, or the reason it cannot be (SRAM, PCUs, PMUs, sharding);
- `costing`: what a candidate costs the ranking (the closed form, `rdusim.cost.analytic`);
- `boundaries`: the fastest cut of a layer's ops into kernels for each kernel count (dynamic
  programming);
- `layer`: one layer kind's search: every plan's best cuts, why each boundary is where it is,
  and the latency-vs-SRAM front;
- `objective`: what a search optimises (time to first token, step time, throughput, throughput
  under a latency bound) and how a simulated program scores on it;
- `mapper`: whole mappings from the kinds' options, kernel looping, the batch, the finalists
  simulated and ranked over the calibration ensemble, and why nothing fits when nothing does.
"""
