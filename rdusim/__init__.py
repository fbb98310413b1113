"""rdusim: a simulator and mapping compiler for dataflow accelerators (SambaNova SN40L).

Data flows one way: specs → IR → compiler passes → Program → simulator → results → reports.
The main entry points are the `rdusim` command and `rdusim.api.run_mapping`.
"""

__version__ = "0.2.0"
