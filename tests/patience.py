"""How long a test waits for something that should happen (a server up, a run finished, a page
drawn) before it calls it hung.

A hang detector, never a speed check: the suite must pass with both cores busy (next to other
work, load average 4 and more), where a server starts, a simulated run finishes or a page's
first search draws several times slower than on a quiet machine. A passing test never waits
this long; what a test asserts about speed belongs in benchmarks/.
"""

PATIENT_S = 240.0
PATIENT_MS = PATIENT_S * 1000
